"""The live parts over a real uvicorn on 127.0.0.1:0: the store's new events as server-sent events (a transition
written by another connection arrives, ticks left out), and an agent's output tailed as it is written."""

from __future__ import annotations

import json

import pytest

from healer import lifecycle
from healer.clock import system
from healer.console import live, security, serve
from healer.records import Agent
from healer.store import open_store
from tests.console.kit import SSE, make_fleet


@pytest.fixture
def served(tmp_path):
    root, store, policy = make_fleet(tmp_path)
    s = serve.start(root, store, policy, system(), security.Access(None, "alice"), port=0)
    yield root, store, s
    s.stop()
    store.close()


def test_a_transition_written_by_another_process_arrives_over_sse_and_ticks_do_not(served):
    root, store, s = served
    assert s.url.startswith("http://127.0.0.1:") and live.POLL <= 0.25  # the poll bounds the latency (bench/console.py)
    store.add_ticket("x", id="T-1")
    sse = SSE(s.url + "api/events")
    try:
        sse.wait(lambda ev, d: ev == "hello")
        other = open_store(root)
        try:
            other.append("supervisor.tick", "", {})
            other.move_ticket("T-1", lifecycle.IN_PROGRESS, actor="dispatch", reason="launched")
        finally:
            other.close()
        _, data = sse.wait(lambda ev, d: ev == "fleet" and json.loads(d)["kind"] == "ticket.moved")
        got = json.loads(data)
        assert (got["subject"], got["from"], got["to"], got["actor"]) == ("T-1", "queued", "in_progress", "dispatch")
        assert not [e for e in sse.fleet() if e["kind"].endswith(".tick")]
    finally:
        sse.close()


def test_a_reconnect_resumes_after_its_last_event_id(served):
    root, store, s = served
    store.add_ticket("x", id="T-1")
    cursor = store.last_event_id()
    store.move_ticket("T-1", lifecycle.CLOSED, actor="human")
    sse = SSE(s.url + "api/events", headers={"Last-Event-ID": str(cursor)})
    try:
        _, data = sse.wait(lambda ev, d: ev == "fleet")
        assert json.loads(data)["to"] == "closed"
    finally:
        sse.close()


def test_an_agents_output_streams_as_it_is_written_and_ends_with_the_agent(served):
    root, store, s = served
    logs = root / ".healer" / "logs" / "agents"
    logs.mkdir(parents=True)
    log = logs / "A-1.log"
    log.write_text("first line\n")
    store.upsert_agent(Agent("A-1", None, "running", pid=None, started_at=store.now()))
    sse = SSE(s.url + "api/agents/A-1/output")
    try:
        sse.wait(lambda ev, d: ev == "output" and "first line" in d)
        with log.open("a") as f:
            f.write("<b>second</b> line\n")
        sse.wait(lambda ev, d: ev == "output" and "<b>second</b> line" in d)  # text as written; the page sets it as text
        store.update_agent("A-1", state="exited", ended_at=store.now())
        sse.wait(lambda ev, d: ev == "end")
    finally:
        sse.close()
