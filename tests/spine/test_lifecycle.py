"""Every transition of the lifecycle table works through the store; every other one is refused."""

from __future__ import annotations

import itertools

import pytest

from healer import lifecycle
from healer.lifecycle import STATES, TRANSITIONS, InvalidTransition


@pytest.mark.parametrize(("frm", "to"), sorted(TRANSITIONS), ids=[f"{f}->{t}" for f, t in sorted(TRANSITIONS)])
def test_each_table_entry_moves(store, frm, to):
    t = store.add_ticket("work", state=frm)
    moved = store.move_ticket(t.id, to, actor="test", reason="because")
    assert moved.state == to == store.ticket(t.id).state
    ev = store.events(kinds=["ticket.moved"], subject=t.id)[-1]
    assert ev.payload == {"from": frm, "to": to, "event": TRANSITIONS[(frm, to)], "actor": "test", "reason": "because"}


def test_every_other_move_is_refused_and_says_what_is_allowed(store):
    illegal = [(f, t) for f, t in itertools.product(STATES, STATES) if f != t and (f, t) not in TRANSITIONS]
    assert illegal
    for frm, to in illegal:
        t = store.add_ticket("work", state=frm)
        before = store.last_event_id()
        with pytest.raises(InvalidTransition) as ei:
            store.move_ticket(t.id, to, actor="test")
        msg = str(ei.value)
        assert f"cannot move {frm} -> {to}" in msg and "\n" not in msg
        allowed = sorted(b for (a, b) in TRANSITIONS if a == frm)
        assert ", ".join(allowed) in msg
        assert store.ticket(t.id).state == frm and store.last_event_id() == before
        assert ei.value.exit_code == 65


def test_unknown_state_and_compare_and_set(store):
    t = store.add_ticket("work")
    with pytest.raises(InvalidTransition, match="unknown state 'doing'"):
        store.move_ticket(t.id, "doing", actor="test")
    with pytest.raises(InvalidTransition, match="expected state review, found queued"):
        store.move_ticket(t.id, "done", actor="test", expect="review")
    assert store.move_ticket(t.id, "queued", actor="test").state == "queued"  # no-op, no event
    assert store.events(kinds=["ticket.moved"]) == []


def test_every_state_is_reachable_from_queued():
    seen, todo = {lifecycle.QUEUED}, [lifecycle.QUEUED]
    while todo:
        s = todo.pop()
        for (f, t) in TRANSITIONS:
            if f == s and t not in seen:
                seen.add(t)
                todo.append(t)
    assert seen == set(STATES)


def test_mermaid_lists_every_transition():
    m = lifecycle.mermaid()
    assert m.startswith("stateDiagram-v2")
    for (f, t), ev in TRANSITIONS.items():
        assert f"{f} --> {t}: {ev}" in m
