"""Who watches the watcher: the dispatcher reports a supervisor that fell silent (one notification per cooldown)."""

from __future__ import annotations

from tests.fleet.conftest import scripted_policy


def _sent(f):
    return [e for e in f.events("notify.sent") if e.subject == "supervisor_silent"]


def test_silent_supervisor_is_reported_at_its_threshold_once_per_cooldown(fleet_factory):
    f = fleet_factory(scripted_policy())
    threshold = f.policy.sentinels.supervisor_silent  # 5m by default
    f.d.tick()
    assert _sent(f) == []  # no supervisor has ever ticked on this fleet: nothing fell silent
    f.store.set_setting("supervisor.last_tick_at", f.clock.now())
    f.clock.advance(threshold - 1)
    f.d.tick()
    assert _sent(f) == []  # one second before the threshold
    f.clock.advance(1)
    f.d.tick()
    assert len(_sent(f)) == 1 and _sent(f)[0].payload["severity"] == "critical"
    for _ in range(10):  # still silent, inside the cooldown: no second notification
        f.clock.advance(60)
        f.d.tick()
    assert len(_sent(f)) == 1
    f.clock.advance(f.policy.sentinels.cooldown)
    f.d.tick()
    assert len(_sent(f)) == 2
