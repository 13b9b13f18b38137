"""A real `healer up` whose clocks libfaketime steps 2 h forward or back while an agent works and a finished ticket's
worktree waits out health.orphan_worktree (issue 40 item 2). Measured before: within a second three pages, the live
agent SIGKILLed by stop-stuck-agent and the worktree removed. Now: one clock.jump event, no kill, no page, no removal.

libfaketime (default mode) moves this process's CLOCK_MONOTONIC with its wall clock (its DONT_FAKE_MONOTONIC breaks
time.sleep in 0.9.10): healer's SystemClock takes the step out against the kernel's /proc/uptime, which no preloaded
library can move. The control (`supervisor.clock_tolerance: null`, clocks trusted) shows the step is a real one: the
live agent is stopped."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from healer.store import open_store
from tests.conftest import make_repo, wait_until
from tests.fleet.conftest import scripted_policy

LIB = next((p for p in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
                        "/usr/lib/faketime/libfaketime.so.1") if os.path.exists(p)), None)
pytestmark = pytest.mark.skipif((LIB is None or shutil.which("faketime") is None) and os.environ.get("CI") != "true",
                                reason="libfaketime is not installed (apt-get install faketime)")


def _events(root: Path, *kinds: str):
    s = open_store(root)
    try:
        return s.events(kinds=list(kinds))
    finally:
        s.close()


def _running(root: Path, tid: str):
    s = open_store(root)
    try:
        return [a for a in s.agents(states=["running"]) if a.ticket_id == tid]
    finally:
        s.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("step,tolerance", [("+2h", "30s"), ("-2h", "30s"), ("+2h", None)],
                         ids=["forward", "back", "forward-control"])
@pytest.mark.long  # 23 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_stepped_clock_kills_nothing_pages_nobody_removes_nothing(tmp_path, step, tolerance):
    assert LIB is not None
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir()
    pol = scripted_policy(pool_size=2, agent_args=("--hang-max", "300")).model_dump(mode="json", by_alias=True)
    pol["fleet"]["dispatch_tick"] = "1s"
    pol["supervisor"] = {"tick": "1s", "clock_tolerance": tolerance}
    (root / "healer.yaml").write_text(yaml.safe_dump(pol, sort_keys=False))
    s = open_store(root)
    s.add_ticket("ticket H-1", id="H-1", body="behaviour: hang\n")
    s.add_ticket("ticket W-1", id="W-1", body="behaviour: success\n")
    s.close()
    offset = tmp_path / "faketime"
    offset.write_text("+0\n")
    env = {**os.environ, "LD_PRELOAD": LIB, "FAKETIME_TIMESTAMP_FILE": str(offset), "FAKETIME_CACHE_DURATION": "1"}
    up = subprocess.Popen([sys.executable, "-m", "healer", "up", "-C", str(root)], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    agent_pid = None
    try:
        [agent] = wait_until(lambda: _running(root, "H-1"), timeout=90, what="the hanging agent running")
        agent_pid = agent.pid
        wait_until(lambda: any(e.payload.get("to") == "done" for e in _events(root, "ticket.moved") if e.subject == "W-1"),
                   timeout=90, what="W-1 done (its worktree kept until health.orphan_worktree)")
        before = len(_events(root, "supervisor.tick"))
        wait_until(lambda: len(_events(root, "supervisor.tick")) >= before + 2, timeout=60, what="two supervisor ticks")
        offset.write_text(f"{step}\n")  # every process of the run: its wall clock (and CLOCK_MONOTONIC) steps
        if tolerance is None:
            wait_until(lambda: not _alive(agent_pid) or _events(root, "intent.done"), timeout=60,
                       what="the control: the live agent stopped on a clock's word")
            assert [e.payload["action"] for e in _events(root, "intent.done")] == ["stop_agent"] or not _alive(agent_pid)
            return
        [jump] = wait_until(lambda: _events(root, "clock.jump"), timeout=60, what="a clock.jump event")
        n = len(_events(root, "supervisor.tick"))
        wait_until(lambda: len(_events(root, "supervisor.tick")) >= n + 5, timeout=60,
                   what="five supervisor ticks after the step (a step back must not stall them)")
        assert abs(jump.payload["size"] - (7200 if step == "+2h" else -7200)) < 60
        assert len(_events(root, "clock.jump")) == 1  # reported once, not per tick (nor once per daemon)
        assert _alive(agent_pid) and _running(root, "H-1"), "the live agent was stopped"
        assert [e.payload for e in _events(root, "intent.planned")] == []  # no stop, no removal, no requeue
        assert [e.payload.get("severity") for e in _events(root, "notify.sent") if e.payload.get("severity") != "info"] == []
        assert (root / ".healer" / "worktrees" / "W-1").is_dir()
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            _, err = up.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
            _, err = up.communicate()
        if agent_pid is not None and _alive(agent_pid):
            os.kill(agent_pid, signal.SIGKILL)  # the agent `up` started outlives it by design
    assert up.returncode == 0, err[-2000:]
