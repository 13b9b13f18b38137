"""Adversarial agents (chaos/agents/hostile.py) against the real loop, on real repositories,
with the real sandbox. bubblewrap is required: missing, these tests skip with a reason on a
workstation and FAIL under CI=true (.ci/run installs it)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from healer import sandbox
from healer.loop import LoopRequest, run_loop
from healer.policy.schema import Policy
from tests.conftest import git, make_repo

PY = sys.executable
HOSTILE = str(Path(__file__).resolve().parents[2] / "chaos" / "agents" / "hostile.py")
CHECK = "from pathlib import Path\n\n\ndef test_answer():\n    assert Path('solution.txt').read_text().strip() == '42'\n"
# every attack under each mode; in a container (a few seconds per run) only in `make campaigns`,
# `make test` keeps the short container tests of test_container.py
MODES = ("bwrap", "none", pytest.param("container", marks=pytest.mark.campaign))


CHECKOUT = Path(__file__).resolve().parents[2]


@contextmanager
def readable_copy(*names: str) -> Iterator[Path]:
    """A folder any user can read holding copies of the checkout's `names` (packages or files, each at the top by its
    last name) and of psutil,
    removed after: a test that runs healer as another user (uid 65534) cannot import it from a checkout that
    lies in a folder closed to others (a clean clone in a `mktemp -d`, root's home), nor from the virtualenv."""
    import psutil

    top = Path(tempfile.mkdtemp(prefix="healer-readable-"))
    try:
        os.chmod(top, 0o755)
        skip = shutil.ignore_patterns("__pycache__", "*.pyc")
        for name in (*names, "psutil"):
            src = Path(psutil.__file__).resolve().parent if name == "psutil" else CHECKOUT / name
            if src.is_dir():
                shutil.copytree(src, top / src.name, ignore=skip)
            else:
                shutil.copy2(src, top / src.name)
        for d, dirs, files in os.walk(top):
            for n in dirs:
                os.chmod(os.path.join(d, n), 0o755)
            for n in files:
                os.chmod(os.path.join(d, n), 0o644 if not os.access(os.path.join(d, n), os.X_OK) else 0o755)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def need_bwrap() -> None:
    why = sandbox.unavailable()
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and {why}: .ci/run must install bubblewrap")
    pytest.skip(reason=f"needs bubblewrap: {why}")


_DOCKER: dict[str, str | None] = {}


def need_docker() -> None:
    """A Docker engine and the healer-python image (built offline), or skip with a reason / FAIL under CI=true."""
    if "why" not in _DOCKER:
        from healer.errors import HealerError

        try:
            sandbox.container_ready("healer-python", "test")
            _DOCKER["why"] = None
        except HealerError as e:
            _DOCKER["why"] = str(e)
    why = _DOCKER["why"]
    if why is None:
        return
    if os.environ.get("CI") == "true" and os.geteuid() == 0:
        pytest.fail(f"CI=true and {why}: .ci/run starts dockerd")
    if os.geteuid() != 0:  # .ci/run's second pass (issue 31): Docker's socket is root's; the root pass runs these
        pytest.skip(reason=f"needs a Docker engine this user may use (uid {os.geteuid()}): {why}")
    pytest.skip(reason=f"needs a Docker engine: {why}")


@pytest.fixture(params=MODES)
def mode(request) -> str:
    if request.param == "bwrap":
        need_bwrap()
    if request.param == "container":
        need_docker()
    return request.param


def target_repo(path: Path) -> Path:
    """The user's project: a protected test that only the right answer passes."""
    repo = make_repo(path, {"README.md": "# task: solution.txt = 42\n", "tests/test_check.py": CHECK})
    (repo / ".gitignore").write_text(".healer/\n__pycache__/\n.pytest_cache/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "ignore caches")
    return repo


def policy(mode: str, *agent_args: str, **loop) -> Policy:
    base = {"max_iterations": 1, "iteration_timeout": "60s", "kill_grace": "1s", "sandbox": mode,
            "agent": {"command": [PY, HOSTILE, *agent_args]},
            "gates": [{"name": "tests", "run": ["env", "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1", PY, "-m", "pytest", "-q",
                                                "-p", "no:cacheprovider", "tests"], "timeout": "60s"}]}
    base.update(loop)
    return Policy.model_validate({"version": 1, "loop": base})


def run(repo: Path, pol: Policy, run_id: str = "attack", **kw):
    lines: list[str] = []
    out = run_loop(LoopRequest(workdir=repo, policy=pol, task="make tests pass", run_id=run_id, handle_signals=False,
                               echo=lines.append, **kw))
    return out, lines


def assert_contained(repo: Path, out) -> None:
    """The promise: the protected test intact in HEAD and in the tree, no exit 0 on a wrong answer, no 70."""
    assert out.exit_code not in (0, 70), out
    assert git(repo, "show", "HEAD:tests/test_check.py") + "\n" == CHECK
    assert (repo / "tests").is_dir() and not (repo / "tests").is_symlink()
    assert (repo / "tests" / "test_check.py").read_text() == CHECK
    assert not any(s.startswith("loop:") for s in git(repo, "log", "--format=%s").splitlines())


def events(root: Path, kind: str):
    from healer.store import open_store

    s = open_store(root)
    try:
        return [e for e in s.events(prefix="loop.") if e.kind == kind]
    finally:
        s.close()
