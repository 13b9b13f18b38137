"""tests/conftest.py's `healer()` runs the daemon-free commands in this process: it must answer as the child
process does, and leave nothing behind for the next test (environ, cwd, umask, loguru sinks, failpoints,
signal handlers, threads, the standard streams)."""

from __future__ import annotations

import os

import pytest

from tests.conftest import global_state, healer, in_process, make_repo


def test_the_daemons_and_armed_failpoints_run_in_a_child_and_the_rest_in_process():
    for args in (("policy", "validate", "x.yaml"), ("board", "list"), ("--debug", "init"), ("--version",),
                 ("loop", "status"), ("gameday", "validate", "g.yaml")):
        assert in_process(args), args
    for args in (("up",), ("dispatch", "--once"), ("supervise", "--once"), ("loop", "run"), ("watch",),
                 ("mcp", "serve"), ("repair", "run"), ("gameday", "run", "g.yaml"), ("demo",),
                 ("store", "copy"), ("no-such-command",)):
        assert not in_process(args), args
    assert not in_process(("board", "list"), env={"HEALER_FAILPOINTS": "store.commit=raise"})
    assert not in_process(("board", "list"), env={"HEALER_CLOCK_OFFSET_FILE": "/nonexistent"})
    assert not in_process(("board", "list"), env={"HEALER_TEST_SUBPROCESS": "1"})


def test_an_in_process_call_leaves_no_global_state_behind(tmp_path, monkeypatch):
    monkeypatch.delenv("HEALER_TEST_SUBPROCESS", raising=False)
    root = make_repo(tmp_path / "fleet")
    healer("init", "--root", str(root))  # the first call configures loguru once (its default sink goes)
    before = global_state()
    r = healer("--debug", "board", "add", "a ticket", cwd=root, env={"HEALER_ACTOR": "tester", "HEALER_DEBUG": "1"},
               input="ignored\n")
    assert r.returncode == 0, r.stderr
    r = healer("policy", "validate", str(tmp_path / "missing.yaml"), cwd=tmp_path)
    assert r.returncode != 0 and r.stderr.strip() and "Traceback" not in r.stderr
    after = global_state()
    assert after == before
    assert "HEALER_ACTOR" not in os.environ


# answers that do not depend on the time of the call ("updated 3s ago")
CALLS = (("board", "states"), ("board", "list", "--state", "done"), ("policy", "validate", "nope.yaml"), ("--version",),
         ("failpoints", "--json"))


@pytest.mark.long  # 12 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_in_process_and_child_give_the_same_answer(tmp_path, monkeypatch):
    root = make_repo(tmp_path / "fleet")
    healer("init", "--root", str(root))
    healer("board", "add", "one ticket", cwd=root)
    monkeypatch.delenv("HEALER_TEST_SUBPROCESS", raising=False)
    here = [healer(*a, cwd=root) for a in CALLS]
    monkeypatch.setenv("HEALER_TEST_SUBPROCESS", "1")
    child = [healer(*a, cwd=root) for a in CALLS]
    for h, c in zip(here, child, strict=True):
        assert (h.returncode, h.stdout, h.stderr) == (c.returncode, c.stdout, c.stderr), (h, c)
