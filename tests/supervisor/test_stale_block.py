"""Blocked tickets flow again once nothing blocks them: the stale_block finding (pure), the unblock_ticket action
(re-checked under the ticket's lease, a compare-and-set on `blocked`), and one real `healer supervise --once`."""

from __future__ import annotations

import json

from healer import lifecycle
from healer.core import decide
from healer.core.model import Memory, Snapshot
from healer.policy.schema import Policy
from healer.records import Proposal
from healer.store import open_store
from tests.conftest import healer, make_repo
from tests.synth import T0, agent, ticket

LATER = T0 + 601  # health.stale_block is 10 min


def found(s: Snapshot, pol: Policy | None = None) -> list[str]:
    return [f.subject for f in decide(s, pol or Policy(), Memory()).findings if f.kind == "stale_block"]


def test_a_blocked_ticket_nothing_blocks_is_found_and_unblocked():
    s = Snapshot(now=LATER, tickets=(ticket("B-1", "blocked"), ticket("D-1", "done"), ticket("B-2", "blocked", blocked_by=("D-1",))))
    d = decide(s, Policy(), Memory())
    assert sorted(f.subject for f in d.findings if f.kind == "stale_block") == ["B-1", "B-2"]
    assert sorted((a.action, a.subject, a.params["expect"]) for a in d.actions) == [
        ("unblock_ticket", "B-1", "blocked"), ("unblock_ticket", "B-2", "blocked")]


def test_what_still_blocks_keeps_it_blocked():
    pol = Policy.model_validate({"fleet": {"wait_labels": ["hold"]}})
    s = Snapshot(now=LATER, tickets=(
        ticket("Q-1", "queued"),
        ticket("B-open", "blocked", blocked_by=("Q-1",)),  # its blocker is not done
        ticket("B-unknown", "blocked", blocked_by=("NOPE",)),  # an unknown blocker still blocks
        ticket("B-review", "blocked", labels={"to-review": T0}),  # a gate label (health.stale_labels)
        ticket("B-hold", "blocked", labels={"hold": T0}),  # a wait label (fleet.wait_labels)
        ticket("B-live", "blocked"),  # an agent still on it
        ticket("B-replays", "blocked"),  # the dispatcher blocked it after its replays: a human's
        ticket("B-young", "blocked", at=LATER - 60),  # not blocked-and-free for 10 min yet
    ), agents=(agent("a1", "B-live"),),
        proposals=(Proposal(id=1, ticket_id="B-replays", branch="b", commit="c", state="rejected", created_at=T0),))
    assert found(s, pol) == []
    # the blocker's ending starts the clock: done 1 min ago is not 10 min
    s2 = Snapshot(now=LATER, tickets=(ticket("D-1", "done", at=LATER - 60), ticket("B-1", "blocked", blocked_by=("D-1",))))
    assert found(s2) == []
    assert found(Snapshot(now=LATER + 600, tickets=s2.tickets)) == ["B-1"]


def test_unblock_refuses_when_something_blocks_again_and_moves_with_a_compare_and_set(tmp_path):
    from healer.clock import VirtualClock
    from healer.remedy.actions import Context, execute

    root = tmp_path / "fleet"
    (root / ".healer").mkdir(parents=True)
    clock = VirtualClock()
    store = open_store(root, clock)
    for tid in ("B-1", "B-2", "Q-1"):
        store.add_ticket(f"ticket {tid}", id=tid)
    store.add_ticket("ticket B-3", id="B-3", blocked_by=["Q-1"])
    for tid in ("B-1", "B-2", "B-3"):
        store.move_ticket(tid, lifecycle.BLOCKED, actor="test")
    store.label("B-2", "to-review", actor="human")
    ctx = Context(root=root, store=store, policy=Policy(), clock=clock, actor="supervisor", batch="t1")
    from healer.core.model import PlannedAction

    outs = {tid: execute(ctx, PlannedAction("unblock_ticket", tid, {"ticket": tid, "expect": "blocked"}))
            for tid in ("B-1", "B-2", "B-3")}
    assert outs["B-1"].status == "done" and store.ticket("B-1").state == lifecycle.QUEUED
    # a human labelled it: the human's quiet period holds it first (and the label would: wait label)
    assert outs["B-2"].status == "refused" and "quiet period" in outs["B-2"].reason, outs["B-2"]
    assert outs["B-3"].status == "aborted" and "still blocked by Q-1" in outs["B-3"].reason, outs["B-3"]
    assert store.ticket("B-2").state == store.ticket("B-3").state == lifecycle.BLOCKED
    [ev] = [e for e in store.events(kinds=["ticket.moved"], subject="B-1") if e.payload["to"] == "queued"]
    assert ev.payload["actor"] == "supervisor" and "nothing blocks it" in ev.payload["reason"]
    store.close()


def test_one_real_tick_unblocks_a_ticket_whose_label_was_dropped(tmp_path):
    root = make_repo(tmp_path / "fleet")
    assert healer("init", "--root", str(root)).returncode == 0
    (root / "healer.yaml").write_text("health: {stale_block: 0s}\n")
    store = open_store(root)
    store.add_ticket("t", id="B-1")
    store.move_ticket("B-1", lifecycle.BLOCKED, actor="dispatcher")
    store.close()
    r = healer("supervise", "--once", "--json", "--root", str(root))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["outcomes"].get("done") == 1, r.stdout
    store = open_store(root)
    assert store.ticket("B-1").state == lifecycle.QUEUED
    assert store.count_events("intent.done", subject="B-1") == 1
    store.close()


def test_plan_counts_the_tickets_that_need_a_human(tmp_path):
    """`healer plan` on a fleet with no finding but two tickets in needs_human does not call it healthy."""
    root = make_repo(tmp_path / "fleet")
    assert healer("init", "--root", str(root)).returncode == 0
    store = open_store(root)
    for tid in ("H-1", "H-2"):
        store.add_ticket("t", id=tid)
        store.move_ticket(tid, lifecycle.NEEDS_HUMAN, actor="dispatcher")
    store.close()
    r = healer("plan", "--root", str(root))
    assert r.returncode == 0, r.stderr
    assert "looks healthy" not in r.stdout and "2 ticket(s) need a human" in r.stdout and "H-1, H-2" in r.stdout
    j = json.loads(healer("plan", "--json", "--root", str(root)).stdout)
    assert j["needs_human"] == ["H-1", "H-2"]
