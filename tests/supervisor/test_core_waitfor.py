"""The wait-for graph: cycles found, broken at the youngest ticket by the edge that leaves it."""

from __future__ import annotations

from healer.core import decide, detect
from healer.core.findings import index
from healer.core.model import Memory, Snapshot
from healer.core.waitfor import build
from healer.policy.schema import Policy
from tests.synth import T0, agent, ticket, worktree

P = Policy()


def cycles(s: Snapshot):
    return [f for f in detect(s, P) if f.kind == "wait_cycle"]


def test_dependency_cycle_breaks_at_the_youngest_by_escalating():
    s = Snapshot(now=T0, tickets=(
        ticket("T-1", "queued", blocked_by=("T-2",), created_at=T0 - 300),
        ticket("T-2", "queued", blocked_by=("T-3",), created_at=T0 - 100),  # youngest
        ticket("T-3", "queued", blocked_by=("T-1",), created_at=T0 - 200),
        ticket("T-4", "queued", blocked_by=("T-1",), created_at=T0),  # waits on the cycle, not in it
    ))
    (f,) = cycles(s)
    assert f.subject == "T-2" and f.evidence["break_edge"] == ["ticket:T-2", "ticket:T-3", "blocked_by"]
    assert f.evidence["tickets"] == ["T-1", "T-2", "T-3"]
    assert f.evidence["break_action"] == "escalate"
    d = decide(s, P, Memory())
    assert [(a.action, a.subject) for a in d.actions if a.reason == f.key] == [("escalate", "T-2")]


def test_done_blocker_is_no_wait():
    s = Snapshot(now=T0, tickets=(ticket("T-1", "queued", blocked_by=("T-2",)), ticket("T-2", "done", blocked_by=("T-1",))))
    assert cycles(s) == []


def test_frozen_incident_agent_worktree_cycle_is_requeued():
    """43 tickets in progress, each waiting for a dead agent whose worktree is gone."""
    n = 43
    s = Snapshot(now=T0, tickets=tuple(ticket(f"T-{i}", "in_progress", created_at=T0 + i) for i in range(n)),
                 agents=tuple(agent(f"A-{i}", f"T-{i}", alive=False, worktree=f"w/T-{i}") for i in range(n)))
    found = cycles(s)
    assert len(found) == n
    f = [f for f in found if f.subject == "T-7"][0]
    assert f.evidence["cycle"] == ["agent:A-7", "worktree:w/T-7", "ticket:T-7"]
    assert f.evidence["break_action"] == "requeue_ticket"
    d = decide(s, Policy.model_validate({"remediation": {"max_actions_per_tick": 100}}), Memory())
    requeued = {a.subject for a in d.actions if a.action == "requeue_ticket"}
    assert requeued == {f"T-{i}" for i in range(n)}  # once each: the other findings on a ticket wait for the next tick


def test_live_agent_breaks_no_cycle():
    s = Snapshot(now=T0, tickets=(ticket("T-1", "in_progress"),), agents=(agent("A-1", "T-1", worktree="w/T-1"),))
    assert cycles(s) == []
    s2 = Snapshot(now=T0, tickets=s.tickets, agents=(agent("A-1", "T-1", alive=False, worktree="w/T-1"),),
                  worktrees=(worktree("w/T-1", "T-1"),))
    assert cycles(s2) == []  # the worktree exists: the agent can be resumed, no circular wait


def test_review_label_cycle_drops_the_label_at_the_youngest():
    s = Snapshot(now=T0, tickets=(
        ticket("T-1", "queued", labels={"to-review": T0}, created_at=T0 - 50),
        ticket("T-2", "queued", blocked_by=("T-1",), data={"reviews": "T-1"}, created_at=T0 - 100),
    ))
    (f,) = cycles(s)
    assert f.subject == "T-1" and f.evidence["break_action"] == "drop_label"
    d = decide(s, P, Memory())
    assert [(a.action, a.params["label"]) for a in d.actions if a.reason == f.key] == [("drop_label", "to-review")]


def test_graph_documents_dead_end_reviewers():
    s = Snapshot(now=T0, tickets=(ticket("T-1", "queued", labels={"to-review": T0}),))
    g = build(s, P, index(s))
    assert g.edges["label:T-1#to-review", "reviewer:T-1#to-review"]["kind"] == "no_reviewer"
    assert cycles(s) == []


def test_an_escalated_ticket_leaves_the_cycle():
    s = Snapshot(now=T0, tickets=(ticket("T-1", "needs_human", blocked_by=("T-2",)), ticket("T-2", "queued", blocked_by=("T-1",))))
    assert cycles(s) == []


def test_a_done_reviewer_no_longer_reviews_the_label_is_a_dead_end():
    """waitfor.py's graph: `label -> ticket R` only while R is live (not done or closed); once R is done nobody
    reviews T and the label leads to the dead-end `reviewer:` node (docs/supervisor-core.md, The wait-for graph)."""
    s = Snapshot(now=T0, tickets=(
        ticket("T-1", "queued", labels={"to-review": T0}),
        ticket("R-1", "done", data={"reviews": "T-1"}),
        ticket("R-2", "closed", data={"reviews": "T-1"}),
    ))
    g = build(s, P, index(s))
    assert set(g.successors("label:T-1#to-review")) == {"reviewer:T-1#to-review"}
    live = Snapshot(now=T0, tickets=(*s.tickets, ticket("R-3", "in_progress", data={"reviews": "T-1"})))
    assert set(build(live, P, index(live)).successors("label:T-1#to-review")) == {"ticket:R-3"}


def test_a_reviews_field_that_names_no_ticket_is_ignored_not_a_crash():
    """`data.reviews` is a ticket id; anything else written there (a list, a number) names no ticket: the ticket
    reviews nothing, and the supervisor still judges the fleet (a label nobody reviews, a cycle elsewhere)."""
    s = Snapshot(now=T0, tickets=(
        ticket("T-1", "queued", labels={"to-review": T0}),
        ticket("R-1", "queued", data={"reviews": ["T-1"]}),
        ticket("R-2", "queued", data={"reviews": 7}),
        ticket("T-2", "queued", blocked_by=("T-3",)), ticket("T-3", "queued", blocked_by=("T-2",)),
    ))
    g = build(s, P, index(s))
    assert set(g.successors("label:T-1#to-review")) == {"reviewer:T-1#to-review"}
    (f,) = cycles(s)
    assert f.evidence["tickets"] == ["T-2", "T-3"]
    d = decide(s, P, Memory())
    assert [a.action for a in d.actions if a.reason == f.key] == ["escalate"]
