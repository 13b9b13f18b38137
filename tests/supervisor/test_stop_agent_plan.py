"""stop_agent's plan (pure): only a live agent is stopped, and a stuck one is marked for resume unless the same
sequence escalates (the ticket then goes to a human, not back to an agent)."""

from __future__ import annotations

from healer.actions import spec as registry
from healer.core.model import Finding


def _plan(kind: str, evidence: dict, do=("stop_agent", "requeue_ticket")):
    f = Finding(kind, "A-1", 0.0, {"ticket": "T-1", **evidence})
    return registry.get("stop_agent").plan(registry.Step("stop_agent", f, "r", tuple(do), None, "rule r"))  # type: ignore[arg-type]


def test_an_agent_that_is_not_live_is_never_stopped():
    assert _plan("agent_stuck", {"agent": "A-1", "agent_live": False, "pid": 42}) == []
    assert _plan("agent_stuck", {"agent_live": True}) == []  # no agent named: nothing to stop


def test_a_live_stuck_agent_is_stopped_and_marked_for_resume_unless_the_sequence_escalates():
    (a,) = _plan("agent_stuck", {"agent": "A-1", "agent_live": True, "pid": 42})
    assert (a.action, a.subject, a.params["agent"], a.params["pid"], a.params["ticket"]) == ("stop_agent", "A-1", "A-1", 42, "T-1")
    assert a.params["mark_for_resume"] is True
    (b,) = _plan("agent_stuck", {"agent": "A-1", "agent_live": True}, do=("stop_agent", "escalate"))
    assert b.params["mark_for_resume"] is False
    (c,) = _plan("zombie_ticket", {"agent": "A-1", "agent_live": True})
    assert c.params["mark_for_resume"] is False  # only a stuck agent's work is resumed
