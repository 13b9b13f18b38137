"""The supervisor launches the repair agent from a tick when the trigger fires, and the run counts to the daily cap."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

import pytest

from healer.clock import VirtualClock, system
from healer.store import open_store
from tests.repair.conftest import child_env, seed_stale, write_policy

H = 3600.0

# the supervisor's own rule only alerts on stale labels: only the repair agent will drop them
POLICY = """\
version: 1
rules:
  - {id: stale-label-alert-only, when: stale_label, do: [notify]}
notify:
  notifiers: [{kind: jsonl, path: .healer/notifications.jsonl}]
"""


# serial: a real tick launches the real repair agent with wall-clock limits: failed side by side under xdist (issue 35)
@pytest.mark.serial
def test_a_tick_launches_the_repair_agent_once_the_blockage_qualifies(fleet: Path, monkeypatch):
    from healer.supervisor import Supervisor, load_memory

    for k, v in child_env().items():
        monkeypatch.setenv(k, v)
    policy = write_policy(fleet, POLICY)
    clock = VirtualClock(system().now() - 5 * H)
    store = open_store(fleet, clock)
    try:
        stale = seed_stale(store, 3)
        clock.advance(2.5 * H)  # the labels are stale (2h) from here on
        sup = Supervisor(fleet, policy, store, clock)
        reports = []
        for step in (0, 1.5 * H, 1.5 * H):  # signalled at +0, +1.5h, +3h
            clock.advance(step)
            reports.append(sup.tick())
        assert [r.repair for r in reports[:2]] == [None, None]
        assert reports[2].repair == "repair agent ran", reports[2].decision.repair_reason
        (started,) = store.events(kinds=["repair.started"])
        assert started.payload["agent"] == "builtin" and any(k.startswith("stale_label:") for k in started.payload["blockages"])
        assert all("to-review" not in store.ticket(t).labels for t in stale)
        clock.advance(60)
        after = sup.tick()
        assert after.repair is None
        assert started.at in load_memory(store).repair_runs  # the run is remembered: the daily cap counts it
    finally:
        store.close()


class _TidyingLauncher:
    """The repair agent's port, scripted: it tidies through the store it is handed, as the real one does."""

    def __init__(self) -> None:
        self.ran = threading.Event()

    def launch(self, root, policy, store, clock, *, reason, blockages):
        store.append("repair.started", "repair-agent", {"agent": "scripted", "reason": reason, "blockages": blockages})
        for t in store.tickets():
            if "to-review" in t.labels:
                store.unlabel(t.id, "to-review", actor="repair-agent")
        self.ran.set()


def _store_fds(root: Path) -> int:
    """This process's open descriptors on the fleet's store files (healer.db and its -wal/-shm)."""
    db = str((root / ".healer").resolve())
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith(db + "/healer.db")
        except OSError:
            continue
    return n


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc/self/fd (Linux)")
def test_the_daemons_background_repair_run_closes_its_own_store_connection(fleet: Path):
    """docs/supervisor.md step 7: the daemon's repair run has a store connection of its own, closed when the run
    ends. The cyclic garbage collector is held off: a connection left to it stays open for an unbounded time."""
    from healer.fleet.ports import REAL, Ports
    from healer.supervisor import Supervisor

    policy = write_policy(fleet, POLICY)
    clock = VirtualClock(system().now() - 5 * H)
    store = open_store(fleet, clock)
    launcher = _TidyingLauncher()
    was = gc.isenabled()
    gc.disable()
    try:
        stale = seed_stale(store, 3)
        clock.advance(2.5 * H)
        sup = Supervisor(fleet, policy, store, clock, ports=Ports(REAL.git, REAL.gates, REAL.processes, launcher),
                         repair_async=True)
        reports = [sup.tick()]
        clock.advance(1.5 * H)
        reports.append(sup.tick())
        # SQLite keeps a closed connection's descriptor while another connection of the process holds a lock on the
        # file, and hands it to the next open: one open and close first, so that before and after compare alike
        open_store(fleet, clock).close()
        before = _store_fds(fleet)
        clock.advance(1.5 * H)
        reports.append(sup.tick())
        assert reports[2].repair == "repair agent launched (background)", reports[2].decision.repair_reason
        assert launcher.ran.wait(60)
        for t in threading.enumerate():
            if t.name == "repair-agent":
                t.join(60)
        assert all("to-review" not in store.ticket(t).labels for t in stale)  # its work is in the shared store
        assert _store_fds(fleet) == before
    finally:
        if was:
            gc.enable()
        store.close()


class _BrokenLauncher:
    def launch(self, root, policy, store, clock, *, reason, blockages):
        raise RuntimeError("the repair agent's model is unreachable")


def test_a_repair_run_that_raises_is_journaled_and_the_supervisor_goes_on(fleet: Path):
    """docs/supervisor.md step 7: a repair run that fails is `repair.failed` with its reason, and the tick (and the
    next one) completes."""
    from healer.fleet.ports import REAL, Ports
    from healer.supervisor import Supervisor

    policy = write_policy(fleet, POLICY)
    clock = VirtualClock(system().now() - 5 * H)
    store = open_store(fleet, clock)
    try:
        seed_stale(store, 3)
        clock.advance(2.5 * H)
        sup = Supervisor(fleet, policy, store, clock, ports=Ports(REAL.git, REAL.gates, REAL.processes, _BrokenLauncher()))
        for step in (0, 1.5 * H, 1.5 * H):
            clock.advance(step)
            rep = sup.tick()
        assert rep.repair == "repair agent ran", rep.decision.repair_reason
        (failed,) = store.events(kinds=["repair.failed"])
        assert failed.payload["reason"] == "RuntimeError: the repair agent's model is unreachable"
        clock.advance(60)
        assert sup.tick().skipped is None
    finally:
        store.close()
