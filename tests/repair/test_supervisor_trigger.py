"""The supervisor launches the repair agent from a tick when the trigger fires, and the run counts to the daily cap."""

from __future__ import annotations

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
