"""`escalate_after` on every rule, default or inline, and an escalation that stops the work (issue 41 item 2)."""

from __future__ import annotations

import pytest

from healer.core import decide
from healer.core.model import Memory, Snapshot
from healer.policy.schema import Policy
from tests.synth import T0, agent, ticket

STUCK_AT = T0 + 2 * 3600  # past health.agent_stuck (90m) with no progress since T0

INLINE = {"rules": [{"id": "stuck-inline", "when": "agent_stuck", "do": ["stop_agent", "requeue_ticket"],
                     "escalate_after": 3}]}


def stuck() -> Snapshot:
    return Snapshot(now=STUCK_AT, tickets=(ticket("S-1", "in_progress"),), agents=(agent("a-4", "S-1"),))


@pytest.mark.parametrize("pol", [{}, INLINE], ids=["default-rule", "inline-rule"])
def test_escalation_after_n_attempts_stops_the_live_agent_then_escalates(pol):
    p = Policy.model_validate(pol)
    before = [STUCK_AT - 15 * 3600, STUCK_AT - 10 * 3600, STUCK_AT - 5 * 3600]  # three earlier stops, past the quiet period
    d = decide(stuck(), p, Memory(attempts={"S-1": before}))
    steps = [(a.action, a.subject) for a in d.actions]
    assert steps == [("stop_agent", "a-4"), ("escalate", "S-1")], d.deferred
    stop = d.actions[0]
    assert stop.params["mark_for_resume"] is False  # the ticket goes to a human, not back to the queue
    assert "escalate_after 3" in d.actions[1].params["why"]


@pytest.mark.parametrize("pol", [{}, INLINE], ids=["default-rule", "inline-rule"])
def test_below_escalate_after_the_rule_acts(pol):
    p = Policy.model_validate(pol)
    d = decide(stuck(), p, Memory(attempts={"S-1": [STUCK_AT - 10 * 3600, STUCK_AT - 5 * 3600]}))
    assert "escalate" not in [a.action for a in d.actions]
    assert d.actions[0].action == "stop_agent" and d.actions[0].params["mark_for_resume"] is True
