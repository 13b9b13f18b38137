"""Docker fixtures: a real engine or nothing.

Every test here needs a Docker engine. Outside CI, when none answers, each test is
skipped with one line saying why; under CI=true a missing engine fails them all
(.ci/run starts dockerd, so a skip there would hide a broken CI).
"""

from __future__ import annotations

import os
import uuid

import pytest

_ENGINE: dict = {}


def _engine():
    if "client" not in _ENGINE and "error" not in _ENGINE:
        try:
            import docker

            c = docker.from_env(timeout=30)
            c.ping()
            _ENGINE["client"] = c
        except Exception as e:  # noqa: BLE001 - any failure means "no engine"
            host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
            _ENGINE["error"] = f"no Docker engine answers at {host} ({type(e).__name__}); start dockerd to run these"
    return _ENGINE.get("client"), _ENGINE.get("error")


def require_engine() -> None:
    """Call at the top of each test module: skip the whole module with one line when no engine
    answers. Under CI=true nothing is skipped: the `dclient` fixture fails every test instead
    (a collection error would interrupt the rest of the suite)."""
    client, error = _engine()
    if client is None and os.environ.get("CI") != "true":
        pytest.skip(reason=error, allow_module_level=True)


@pytest.fixture(scope="session")
def dclient():
    client, error = _engine()
    if client is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {error}", pytrace=False)
        pytest.skip(reason=error)
    from healer.containers import images

    images.build(client)
    return client


@pytest.fixture(autouse=True)
def _needs_engine(dclient):
    return dclient


@pytest.fixture
def fleet_label(dclient, tmp_path):
    """A unique fleet label value; every container carrying it is removed after the test."""
    value = f"{tmp_path}/fleet-{uuid.uuid4().hex[:8]}"
    yield value
    for c in dclient.containers.list(all=True, filters={"label": f"healer.fleet={value}"}):
        try:
            c.remove(force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


@pytest.fixture
def runtime(dclient):
    from healer.fleet.container_runtime import ContainerRuntime

    rt = ContainerRuntime(client=dclient)
    yield rt
    for h in rt.children():
        rt.remove(h)


def state_of(client, cid: str) -> str:
    import docker.errors

    try:
        return client.api.inspect_container(cid)["State"]["Status"]
    except docker.errors.NotFound:
        return "gone"
