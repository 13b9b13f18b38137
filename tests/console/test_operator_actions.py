"""The operator's actions of the registry (healer/actions/release_ticket.py, ack_page.py) on the executor's one path,
and the executor beside the supervisor in one process (`healer up --console-port`): a steer in flight in one thread is
never "recovered" by the supervisor's thread as a dead process's leftover."""

from __future__ import annotations

import threading

import pytest

from healer import actions, lifecycle
from healer.actions.spec import Handler
from healer.clock import system
from healer.core.model import PlannedAction
from healer.notify import notify
from healer.remedy.actions import ABORTED, DONE, HANDLERS, REFUSED, Context, execute, recover
from tests.console.kit import make_fleet


@pytest.fixture
def fleet(tmp_path):
    root, store, policy = make_fleet(tmp_path)
    yield root, store, policy
    store.close()


def _ctx(root, store, policy, actor="operator:zoe"):
    return Context(root, store, policy, system(), actor=actor)


def test_operator_actions_are_in_the_registry_and_the_shipped_whitelist_and_never_planned_by_a_rule(fleet):
    _, _, policy = fleet
    for name in ("release_ticket", "ack_page"):
        spec = actions.get(name)
        assert spec.plan is None and spec.answers == frozenset() and spec.tool is None and spec.lease is None
        assert name in policy.remediation.allowed


def test_release_ticket_hands_a_needs_human_ticket_back_and_aborts_on_any_other_state(fleet):
    root, store, policy = fleet
    store.add_ticket("x", id="T-1", state=lifecycle.NEEDS_HUMAN, labels=["needs-human"])
    store.add_ticket("y", id="T-2")
    out = execute(_ctx(root, store, policy), PlannedAction("release_ticket", "T-1", {"why": "looked at it"}))
    assert out.status == DONE, out
    t = store.ticket("T-1")
    assert t.state == lifecycle.QUEUED and "needs-human" not in t.labels
    [mv] = [e for e in store.events(kinds=["ticket.moved"], subject="T-1")]
    assert (mv.payload["actor"], mv.payload["reason"]) == ("operator:zoe", "looked at it")
    out = execute(_ctx(root, store, policy), PlannedAction("release_ticket", "T-2", {}))
    assert (out.status, out.reason) == (ABORTED, "T-2 is queued, not needs_human")
    assert execute(_ctx(root, store, policy), PlannedAction("release_ticket", "T-9", {})).status == REFUSED


def test_ack_page_resolves_nothing_it_cannot_and_is_journaled_once_per_send(fleet):
    root, store, policy = fleet
    assert notify(store, policy, "no_closes:proposals", "no closes", severity="warning")
    out = execute(_ctx(root, store, policy), PlannedAction("ack_page", "no_closes:proposals", {}))
    assert out.status == DONE and out.detail == {"resolved": False}  # the jsonl notifier takes no resolves
    [it] = store.intents(states=["done"])
    assert (it.action, it.actor) == ("ack_page", "operator:zoe")
    assert execute(_ctx(root, store, policy), PlannedAction("ack_page", "no_closes:proposals", {})).status == ABORTED


def test_a_steer_in_flight_in_one_thread_is_not_recovered_by_the_supervisor_in_another(fleet):
    root, store, policy = fleet
    real = HANDLERS["pause_dispatch"]
    entered, go = threading.Event(), threading.Event()

    def slow_check(ctx, t):  # the console's thread, between its intent and its effect
        entered.set()
        assert go.wait(30)
        real.check(ctx, t)

    HANDLERS["pause_dispatch"] = Handler(real.resolve, slow_check, real.apply, real.verify)
    got = []
    try:
        th = threading.Thread(target=lambda: got.append(execute(_ctx(root, store, policy), PlannedAction("pause_dispatch", "dispatch", {}))))
        th.start()
        assert entered.wait(30)
        assert recover(_ctx(root, store, policy, actor="supervisor")) == []  # the supervisor's tick, same process
        [it] = store.intents()
        assert it.state == "planned"
        go.set()
        th.join(30)
    finally:
        go.set()
        del HANDLERS["pause_dispatch"]
    assert got[0].status == DONE and [i.state for i in store.intents()] == ["done"]
