"""Failpoints: kill at exactly the Nth hit in a real process, raise, inert when unset, listed by the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from healer import failpoints
from tests.conftest import healer
from tests.spine.conftest import REPO

CHILD = textwrap.dedent("""
    import sys
    from healer import failpoints
    FP = failpoints.declare("spine.test_point", "tests/spine/test_failpoints.py: the child's loop")
    for i in range(1, 11):
        print(f"before {i}", flush=True)
        try:
            failpoints.hit(FP)
        except failpoints.FailpointError as e:
            print(f"raised {i}: {e}", flush=True)
            sys.exit(7)
        print(f"after {i}", flush=True)
""")


def _child(spec: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != failpoints.ENV}
    if spec is not None:
        env[failpoints.ENV] = spec
    return subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("n", [1, 3, 10])
def test_kill_at_exactly_the_nth_hit(n):
    r = _child(f"spine.test_point=kill@{n}")
    assert r.returncode == -signal.SIGKILL
    lines = r.stdout.splitlines()
    assert lines[-1] == f"before {n}"
    assert lines.count(f"after {n - 1}") == (1 if n > 1 else 0)
    assert f"after {n}" not in lines


def test_raise_and_other_names_and_unset():
    r = _child("spine.test_point=raise@2")
    assert r.returncode == 7 and "raised 2: failpoint spine.test_point fired (hit 2)" in r.stdout
    r = _child("spine.other=kill;loop.x=raise")  # aimed elsewhere: inert here
    assert r.returncode == 0 and "after 10" in r.stdout
    r = _child(None)
    assert r.returncode == 0 and r.stdout.count("after") == 10
    r = _child("spine.test_point=sleep(1)")
    assert r.returncode == 0 and "after 10" in r.stdout
    r = _child("spine.test_point=exit(5)@4")
    assert r.returncode == 5 and r.stdout.splitlines()[-1] == "before 4"


def test_unset_hit_is_one_lookup(monkeypatch):
    monkeypatch.delenv(failpoints.ENV, raising=False)
    failpoints.reset()
    for _ in range(1000):
        failpoints.hit("store.before_commit")
    assert failpoints._hits == {}  # nothing counted, nothing parsed
    monkeypatch.setenv(failpoints.ENV, "store.before_commit=raise@2")  # set later, still seen
    failpoints.hit("store.before_commit")
    with pytest.raises(failpoints.FailpointError):
        failpoints.hit("store.before_commit")
    monkeypatch.delenv(failpoints.ENV)
    failpoints.reset()
    failpoints.hit("store.before_commit")


@pytest.mark.parametrize("spec", ["nonsense", "a.b=explode", "a.b=kill@x", "=kill", "store.before_commit=sleep(abc)",
                                  "store.before_commit=exit(abc)", "store.before_commit=exit(256)", "a.b=raise@0",
                                  "a.b=kill(3)", "a.b=sleep(-1)"])
@pytest.mark.long  # 25 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_bad_spec_is_a_clear_error(spec):
    with pytest.raises(ValueError, match=r"^HEALER_FAILPOINTS: "):
        failpoints.parse_spec(spec)
    r = healer("failpoints", env={failpoints.ENV: spec})
    assert r.returncode == 64, r.stderr
    assert r.stderr.startswith("healer: HEALER_FAILPOINTS: ") and len(r.stderr.strip().splitlines()) == 1


def test_spec_parsing():
    assert failpoints.parse_spec("remedy.after_intent=kill@2; loop.x=raise ;x.y=sleep(200)") == {
        "remedy.after_intent": ("kill", "", 2), "loop.x": ("raise", "", None), "x.y": ("sleep", "200", None)}


def test_cli_lists_every_registered_name(cli):
    r = healer("failpoints", "--json")
    assert r.returncode == 0, r.stderr
    points = json.loads(r.stdout)
    names = [p["name"] for p in points]
    assert names == sorted(names) and len(names) == len(set(names))
    assert "store.before_commit" in names
    sc = next(p for p in points if p["name"] == "store.before_commit")
    assert sc["module"] == "healer.store.sql" and sc["where"] and sc["line"] > 0
    table = cli("failpoints")
    assert table.code == 0 and "store.before_commit" in table.out
