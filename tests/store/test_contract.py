"""The Store contract: what every backend must do, run against SQLite and PostgreSQL alike.

A new backend passes this file before anything else in healer may use it.
"""

from __future__ import annotations

import pytest

from healer import lifecycle
from healer.errors import HealerError, NotFound, StaleLease
from healer.records import Agent, Worktree
from healer.store import open_url
from healer.store.migrations import CURRENT

# -- tickets -----------------------------------------------------------------------------------


def test_tickets_get_ids_and_keep_their_fields(store):
    a = store.add_ticket("first", body="b", priority=3, labels=["x", "y"], data={"k": [1, 2]})
    b = store.add_ticket("second", blocked_by=[a.id], priority=1)
    c = store.add_ticket("named", id="OPS-9")
    assert (a.id, b.id, c.id) == ("T-1", "T-2", "OPS-9")
    got = store.ticket(a.id)
    assert (got.title, got.body, got.priority, got.state, got.data) == ("first", "b", 3, "queued", {"k": [1, 2]})
    assert set(got.labels) == {"x", "y"}
    assert store.ticket(b.id).blocked_by == (a.id,)
    assert [t.id for t in store.tickets()] == ["T-2", "OPS-9", "T-1"]  # priority, then age
    assert [t.id for t in store.tickets(states=["queued"])] == ["T-2", "OPS-9", "T-1"]
    assert store.tickets(states=["done"]) == []
    with pytest.raises(HealerError, match="already exists"):
        store.add_ticket("again", id="OPS-9")
    with pytest.raises(NotFound):
        store.ticket("nope")


def test_moves_follow_the_lifecycle_and_compare_and_set(store):
    t = store.add_ticket("t")
    store.move_ticket(t.id, lifecycle.IN_PROGRESS, actor="d")
    with pytest.raises(lifecycle.InvalidTransition):
        store.move_ticket(t.id, lifecycle.REVIEW, actor="d", expect=lifecycle.QUEUED)
    assert store.ticket(t.id).state == lifecycle.IN_PROGRESS
    with pytest.raises(lifecycle.InvalidTransition):
        store.move_ticket(t.id, "nonsense", actor="d")
    store.move_ticket(t.id, lifecycle.REVIEW, actor="d", reason="why", expect=lifecycle.IN_PROGRESS)
    ev = store.events(kinds=["ticket.moved"])
    assert [(e.payload["from"], e.payload["to"], e.payload["reason"]) for e in ev] == [
        ("queued", "in_progress", ""), ("in_progress", "review", "why")]


def test_labels_comments_data_and_touch(store, vclock):
    t = store.add_ticket("t")
    assert store.label(t.id, "to-review", actor="h") is True
    assert store.label(t.id, "to-review", actor="h") is False
    assert store.unlabel(t.id, "to-review", actor="h") is True
    assert store.unlabel(t.id, "to-review", actor="h") is False
    c = store.comment(t.id, "evidence: 100%_sure", author="healer")
    assert [x.body for x in store.comments(t.id)] == ["evidence: 100%_sure"] and c.id >= 1
    store.set_ticket_data(t.id, a=1)
    store.set_ticket_data(t.id, b="two")
    assert store.ticket(t.id).data == {"a": 1, "b": "two"}
    vclock.advance(5)
    store.touch_ticket(t.id)
    assert store.ticket(t.id).updated_at == vclock.now()
    with pytest.raises(NotFound):
        store.label("nope", "x", actor="h")
    kinds = [e.kind for e in store.events(subject=t.id)]
    assert kinds.count("ticket.labeled") == 1 and kinds.count("ticket.unlabeled") == 1


# -- agents, worktrees, proposals, attempts --------------------------------------------------------


def test_agents(store, vclock):
    a = Agent("A-1", "T-1", "running", pid=123, host="h1", run_id="r1", worktree="/w", started_at=vclock.now(),
              heartbeat_at=vclock.now(), progress_at=vclock.now(), data={"argv": ["x"]})
    store.upsert_agent(a)
    store.upsert_agent(a)  # registered once
    vclock.advance(3)
    store.heartbeat("A-1", progress=True)
    got = store.agent("A-1")
    assert got.heartbeat_at == got.progress_at == vclock.now() and got.data == {"argv": ["x"]}
    store.update_agent("A-1", state="exited", exit_code=0, ended_at=vclock.now())
    assert store.agents(states=["running"]) == []
    assert [x.id for x in store.agents(ticket_id="T-1")] == ["A-1"]
    assert store.count_events("agent.registered") == 1 and store.count_events("agent.ended") == 1
    with pytest.raises(ValueError):
        store.update_agent("A-1", nonsense=1)
    with pytest.raises(NotFound):
        store.agent("A-9")


def test_agents_to_reap_are_the_ended_ones_the_reaper_still_owes(store, vclock):
    """What the dispatcher's reaper asks every pass: ended agents not reaped yet, or reaped by another host
    (a lost host's tickets were reclaimed) and not stopped here yet; per host."""
    def agent(id, host, **data):
        return Agent(id, "T-1", "running", pid=1, host=host, started_at=vclock.now(), data=data)

    store.upsert_agent(agent("A-1", "h1", argv=['"reaped":true']))  # the text inside a string is no mark
    store.upsert_agent(agent("A-2", "h1", reaped=False))
    store.upsert_agent(agent("A-3", "h2"))
    store.upsert_agent(agent("A-4", "h1"))
    store.upsert_agent(agent("A-5", "h1"))
    assert store.agents_to_reap() == []  # all running
    for a in ("A-1", "A-2", "A-3", "A-5"):
        store.update_agent(a, state="lost")
    assert [a.id for a in store.agents_to_reap("h1")] == ["A-1", "A-2", "A-5"]
    assert [a.id for a in store.agents_to_reap()] == ["A-1", "A-2", "A-3", "A-5"]
    store.update_agent("A-2", data={"reaped": True, "x": 1})  # reaped here: owed nothing
    store.update_agent("A-5", data={"reaped": True, "reaped_by": "h2"})  # reclaimed by another host: to stop here
    store.update_agent("A-1", state="exited", exit_code=0)
    assert [a.id for a in store.agents_to_reap("h1")] == ["A-1", "A-5"]
    store.update_agent("A-5", data={"reaped": True, "reaped_by": "h2", "stopped_here": True})
    assert [a.id for a in store.agents_to_reap("h1")] == ["A-1"]


def test_worktrees_proposals_attempts(store):
    store.add_worktree(Worktree("/w/T-1", "T-1", "healer/T-1", 1.0))
    store.add_worktree(Worktree("/w/T-2", "T-2", "healer/T-2", 2.0))
    store.update_worktree("/w/T-1", state="removed", removed_at=3.0)
    assert [w.path for w in store.worktrees()] == ["/w/T-2"]
    assert [w.path for w in store.worktrees(states=None)] == ["/w/T-1", "/w/T-2"]
    t1, t2 = store.add_ticket("a"), store.add_ticket("b")
    p = store.add_proposal(t1.id, "healer/T-1", "abc123")
    assert (p.state, p.commit) == ("open", "abc123")
    store.decide_proposal(p.id, "merged", gate_log="ok")
    assert store.proposals(t1.id)[0].state == "merged" and store.proposals(t2.id) == []
    a1 = store.add_attempt(t1.id, "launch", run_id="r1", head="h0")
    store.finish_attempt(a1.id, exit_code=3, failure_signature="sig", state_hash="s", gate_log_tail="tail")
    store.add_attempt(t2.id, "launch")
    store.add_attempt(t1.id, "resume")
    got = store.attempts(t1.id)
    assert [(x.kind, x.exit_code, x.failure_signature) for x in got] == [("launch", 3, "sig"), ("resume", None, None)]
    everything = store.all_attempts()
    assert {k: len(v) for k, v in everything.items()} == {t1.id: 2, t2.id: 1}
    store.move_ticket(t2.id, lifecycle.CLOSED, actor="h")
    assert set(store.all_attempts(skip_ticket_states=[lifecycle.CLOSED])) == {t1.id}


def test_a_decided_proposal_keeps_its_first_decision(store):
    """A merge verdict asked again (a pass retried after a failover: its first write took effect, the answer was lost)
    is recognised, not an InvalidTransition that fails the pass (issue 40)."""
    t = store.add_ticket("a")
    p = store.add_proposal(t.id, "healer/T-1", "abc123")
    assert store.decide_proposal(p.id, "merged", gate_log="ok") == "merged"
    assert store.decide_proposal(p.id, "merged", gate_log="again") == "merged"
    assert store.decide_proposal(p.id, "rejected", gate_log="main moved") == "merged"
    got = store.proposals(t.id)[0]
    assert (got.state, got.gate_log) == ("merged", "ok")
    again = store.events(kinds=["proposal.already_decided"])
    assert [(e.payload["held"], e.payload["asked"]) for e in again] == [("merged", "merged"), ("merged", "rejected")]
    assert len(store.events(kinds=["proposal.merged"])) == 1
    with pytest.raises(lifecycle.InvalidTransition):
        store.decide_proposal(store.add_proposal(t.id, "healer/T-1", "def").id, "bogus")


# -- intents -----------------------------------------------------------------------------------------


def test_intents_move_forward_only(store, vclock):
    i = store.plan_intent("requeue_ticket", "T-1", {"why": "x"}, actor="healer", reason="r")
    store.set_intent(i.id, "begun")
    with pytest.raises(HealerError):
        store.set_intent(i.id, "planned")
    store.set_intent(i.id, "done", {"ok": True})
    j = store.plan_intent("drop_label", "T-2", {}, actor="healer")
    assert [x.id for x in store.intents(states=["planned"])] == [j.id]
    assert store.intents(subject="T-1")[0].result == {"ok": True}
    assert store.count_intents(action="requeue_ticket") == 1
    assert store.count_intents(states=["done", "aborted"]) == 1
    assert store.count_intents(since=vclock.now() + 1) == 0
    assert len(store.intents(limit=1)) == 1
    k = store.plan_intent("requeue_ticket", "T-3", {}, actor="repair-agent")
    assert [x.id for x in store.intents(actions=["requeue_ticket"])] == [i.id, k.id]
    assert [x.id for x in store.intents(actions=["requeue_ticket"], exclude_actor="healer")] == [k.id]
    assert [x.id for x in store.intents(actions={"drop_label", "stop_agent"})] == [j.id]
    assert store.intents(actions=[]) == []


# -- leases and fencing ------------------------------------------------------------------------------


def test_lease_tokens_grow_with_each_new_holder(store, vclock):
    a = store.acquire_lease("supervisor", "A", 1, "h1", 30)
    assert a is not None and a.token == 1
    assert store.acquire_lease("supervisor", "B", 2, "h2", 30) is None
    renewed = store.acquire_lease("supervisor", "A", 1, "h1", 30)
    assert renewed.token == 1 and renewed.acquired_at == a.acquired_at
    vclock.advance(31)
    b = store.acquire_lease("supervisor", "B", 2, "h2", 30)
    assert b.token == 2 and store.lease("supervisor").holder == "B"
    store.release_lease("supervisor", "B")
    assert store.lease("supervisor") is None
    c = store.acquire_lease("supervisor", "A", 1, "h1", 30)
    assert c.token == 3  # a token never comes back, even after a release
    dead = store.acquire_lease("supervisor", "D", 9, "h1", 30, pid_alive=lambda pid: False)
    assert dead.token == 4  # the holder's process is gone on the same host
    kinds = [e.kind for e in store.events(prefix="lease.")]
    assert kinds == ["lease.acquired", "lease.taken_over", "lease.released", "lease.acquired", "lease.taken_over"]


def test_a_stale_holders_write_is_refused_and_recorded(store_url, vclock, tmp_path):
    old = open_url(store_url, vclock, root=tmp_path)
    new = open_url(store_url, vclock, root=tmp_path)
    try:
        lease = old.acquire_lease("supervisor", "old", 1, "h1", 30)
        old.hold(lease)
        t = old.add_ticket("written while holding")
        vclock.advance(31)  # old is paused past its ttl; new takes over
        new.hold(new.acquire_lease("supervisor", "new", 2, "h2", 30))
        with pytest.raises(StaleLease, match="no longer the holder"):
            old.move_ticket(t.id, lifecycle.IN_PROGRESS, actor="old")
        assert new.ticket(t.id).state == lifecycle.QUEUED
        refused = new.events(kinds=["lease.stale_write_refused"])
        assert [(e.payload["holder"], e.payload["token"], e.payload["current_token"]) for e in refused] == [("old", 1, 2)]
        new.move_ticket(t.id, lifecycle.IN_PROGRESS, actor="new")  # the holder's writes pass
        assert old.acquire_lease("supervisor", "old", 1, "h1", 30) is None
    finally:
        old.close()
        new.close()


# -- cooldowns, settings ----------------------------------------------------------------------------


def test_cooldowns_and_settings(store, vclock):
    assert store.cooldown_pass("k", 60) is True
    assert store.cooldown_pass("k", 60) is False
    assert store.cooldown_pass("k", 60) is False
    assert store.cooldowns()["k"][1] == 2
    vclock.advance(60)
    assert store.cooldown_pass("k", 60) is True
    assert store.get_setting("x", "dflt") == "dflt"
    store.set_setting("x", {"a": [1, 2]})
    store.set_setting("x", 7, event="setting.changed")
    assert store.get_setting("x") == 7
    assert store.events(kinds=["setting.changed"])[0].payload == {"value": 7}
    store.set_setting("y", [1, "two"])
    assert store.get_settings(["x", "y", "never"]) == {"x": 7, "y": [1, "two"], "never": None}
    assert store.get_settings([]) == {}


# -- events ------------------------------------------------------------------------------------------


def test_events_filters(store, vclock):
    ids = [store.append("a.one", "s1", {"msg": "50% done_now"}), store.append("a.two", "s2", {"msg": "x"})]
    vclock.advance(10)
    ids.append(store.append("b.one", "s1", {"n": 1}, at=vclock.now()))
    assert ids == sorted(ids) and store.last_event_id() == ids[-1]
    assert [e.id for e in store.events(after=ids[0])] == ids[1:]
    assert [e.kind for e in store.events(kinds=["a.two", "b.one"])] == ["a.two", "b.one"]
    assert [e.kind for e in store.events(subject="s1")] == ["a.one", "b.one"]
    assert [e.kind for e in store.events(since=vclock.now())] == ["b.one"]
    assert [e.kind for e in store.events(prefix="a.")] == ["a.one", "a.two"]
    assert [e.kind for e in store.events(contains="50% done_now")] == ["a.one"]
    assert store.events(contains="50%_done") == []  # % and _ are literal
    assert [e.kind for e in store.events(contains='"n":1')] == ["b.one"]
    assert [e.kind for e in store.events(limit=2)] == ["a.one", "a.two"]
    assert [e.id for e in store.events(until_id=ids[1])] == ids[:2]
    assert store.event_heads(after=ids[0]) == [(ids[1], "a.two", "s2"), (ids[2], "b.one", "s1")]
    assert store.event_heads(after=ids[0], limit=1) == [(ids[1], "a.two", "s2")] and store.event_heads(after=ids[2]) == []
    assert [e.id for e in store.events(after=ids[0], until_id=ids[1])] == [ids[1]]
    assert [e.kind for e in store.tail(2)] == ["a.two", "b.one"]
    assert store.count_events("a.one") == 1 and store.count_events("a.one", subject="s2") == 0
    assert store.count_events("b.one", since=vclock.now() + 1) == 0


def test_wait_for_events_returns_at_once_when_there_is_news(store):
    first = store.append("x")
    assert store.wait_for_events(0, timeout=5) == first
    assert store.wait_for_events(first, timeout=0.2) == first  # nothing new: times out


# -- claims ------------------------------------------------------------------------------------------


def test_claims_take_the_first_queued_ticket(store):
    store.add_ticket("low", priority=3)
    hi = store.add_ticket("high", priority=1)
    other = store.add_ticket("other", priority=0)
    got = store.claim_ticket(actor="d1", among=[hi.id, "T-1"])
    assert got.id == hi.id and got.state == lifecycle.IN_PROGRESS
    assert store.claim_ticket(actor="d1").id == other.id
    assert store.claim_ticket(actor="d1").id == "T-1"
    assert store.claim_ticket(actor="d1") is None
    moved = store.events(kinds=["ticket.moved"])
    assert [e.payload["actor"] for e in moved] == ["d1"] * 3


# -- schema ------------------------------------------------------------------------------------------


def test_schema_is_at_the_current_version_and_reopening_is_a_no_op(store_url, vclock, tmp_path):
    s = open_url(store_url, vclock, root=tmp_path)
    s.add_ticket("kept")
    assert s.version() == CURRENT
    s.close()
    s = open_url(store_url, vclock, root=tmp_path)
    assert s.version() == CURRENT and [t.title for t in s.tickets()] == ["kept"]
    s.close()


# -- the notification outbox -------------------------------------------------------------------------


def test_outbox_owes_claims_and_delivers_once(store, vclock):
    rows = [("hook-a", {"notifier": "a", "text": "main is red"}), ("hook-b", {"notifier": "b", "text": "main is red"})]
    assert store.enqueue_notification("main_red", 60, "idem-1", rows, vclock.now() + 3600, {"text": "main is red"}) is True
    assert store.enqueue_notification("main_red", 60, "idem-2", rows, vclock.now() + 3600, {}) is False  # owed already
    claimed, expired = store.outbox_claim("courier-1", limit=10, lease=30)
    assert len(claimed) == 2 and expired == []
    assert store.outbox_claim("courier-2", limit=10, lease=30) == ([], [])  # claimed rows are skipped
    assert store.outbox_delivered(claimed[0].id) is True
    assert store.outbox_delivered(claimed[0].id) is False  # a late second success is not a second delivery
    assert [i.state for i in store.outbox(key="main_red")] == ["delivered", "pending"]
    assert store.count_events("notify.sent") == 1 and store.count_events("notify.delivered") == 1


def test_a_dead_couriers_claims_are_taken_at_once_and_a_live_ones_are_not(store, vclock):
    rows = [("hook-a", {"notifier": "a", "text": "main is red"})]
    store.enqueue_notification("main_red", 60, "idem-1", rows, vclock.now() + 3600, {"text": "main is red"})
    [first], _ = store.outbox_claim("courier-1", limit=10, lease=300)
    assert store.outbox_claim("courier-2", limit=10, lease=30, dead=lambda h: False) == ([], [])
    [again], _ = store.outbox_claim("courier-2", limit=10, lease=30, dead=lambda h: h == "courier-1")
    assert again.id == first.id and again.idem == first.idem
    assert [(i.claimed_by, i.state) for i in store.outbox(key="main_red")] == [("courier-2", "pending")]


def test_wait_for_events_wakes_when_another_connection_writes(store_url, tmp_path):
    import threading

    from healer.clock import system

    waiter, writer = open_url(store_url, root=tmp_path), open_url(store_url, root=tmp_path)
    try:
        start = waiter.append("start")
        got: list[float] = []
        clock = system()

        def wait() -> None:
            t0 = clock.monotonic()
            assert waiter.wait_for_events(start, timeout=60) > start
            got.append(clock.monotonic() - t0)

        th = threading.Thread(target=wait)
        th.start()
        clock.sleep(0.3)
        writer.append("news", "elsewhere")
        th.join(timeout=90)
        assert got and got[0] < 30, got  # woken by the write (NOTIFY / poll), not by the 60 s timeout
    finally:
        waiter.close()
        writer.close()


def test_reads_by_id_upserts_and_integrity_are_the_same_on_both(store, vclock):
    """Written once (healer/store/sql.py), run as written by both: reads by id, an upsert that replaces a row
    (a label's time, an agent re-registered), a setting's stored text, and the store's own integrity check."""
    from healer.records import Agent

    a, b = store.add_ticket("a", labels=["x"]), store.add_ticket("b")
    assert sorted(t.id for t in store.tickets_by_ids([a.id, b.id, "T-99"])) == [a.id, b.id]
    assert store.tickets_by_ids([]) == [] and store.agents_by_ids([]) == []
    assert store.label(a.id, "x", actor="t", at=5.0) and store.ticket(a.id).labels == {"x": 5.0}  # replaced
    assert not store.label(a.id, "x", actor="t")  # already there: nothing written
    ag = Agent("A-1", a.id, "running", pid=1, host="h", started_at=1.0, heartbeat_at=1.0, progress_at=1.0)
    store.upsert_agent(ag)
    store.upsert_agent(Agent("A-1", a.id, "running", pid=2, host="h", started_at=1.0, heartbeat_at=1.0, progress_at=1.0))
    assert [x.pid for x in store.agents_by_ids(["A-1"])] == [2] and store.count_events("agent.registered") == 1
    store.set_setting("k", {"v": 1})
    store.set_setting("k", {"v": 2})
    assert store.setting_text("k") == '{"v":2}' and store.setting_text("nope") is None
    assert store.integrity() == "ok" and store.integrity(quick=True) == "ok"
