"""The scripted model kit on its own (no CLI needed): both wires stream the script's turn for the conversation."""

from __future__ import annotations

import http.client
import json
import threading

import pytest

from chaos.agents.models.scripts import NAMES, build
from chaos.agents.models.server import ModelServer


def post(m: ModelServer, path: str, body: dict, timeout: float = 10) -> list[tuple[str, dict]]:
    c = http.client.HTTPConnection("127.0.0.1", m.port, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    events, name = [], ""
    for line in r.read().decode().splitlines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            events.append((name, json.loads(line[6:])))
    c.close()
    return events


def test_every_script_builds():
    for name in NAMES:
        s = build(name)
        assert s.turns and s.turn(0).kind in ("shell", "read", "write", "text")
    with pytest.raises(KeyError):
        build("nope")


def test_messages_wire_turn_by_tool_results():
    with ModelServer("converge") as m:
        first = post(m, "/v1/messages", {"model": "claude-sonnet-4-5", "stream": True, "tools": [{"name": "Bash"}],
                                         "system": "Working directory: /w\n", "messages": [{"role": "user", "content": "go"}]})
        kinds = [e for e, _ in first]
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
        block = next(d["content_block"] for e, d in first if e == "content_block_start")
        assert block["name"] == "Read"
        args = json.loads(next(d["delta"]["partial_json"] for e, d in first if e == "content_block_delta"))
        assert args == {"file_path": "/w/calc.py"}
        after = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}] * 3
        last = post(m, "/v1/messages", {"stream": True, "tools": [{"name": "Bash"}], "messages": after})
        delta = next(d for e, d in last if e == "message_delta")
        assert delta["delta"]["stop_reason"] == "end_turn" and delta["usage"]["output_tokens"] == 12
        side = post(m, "/v1/messages", {"stream": True, "messages": [{"role": "user", "content": "title?"}]})
        assert not any(r["scripted"] for r in m.requests[-1:]) and side


def test_responses_wire_picks_the_shell_tool_offered():
    with ModelServer("never_done") as m:
        ev = post(m, "/v1/responses", {"model": "gpt-5-codex", "stream": True, "tools": [{"name": "exec_command"}],
                                       "input": [{"type": "message", "role": "user", "content": []}]})
        item = next(d["item"] for e, d in ev if e == "response.output_item.done")
        assert item["type"] == "function_call" and item["name"] == "exec_command"
        assert "notes.md" in json.loads(item["arguments"])["cmd"]
        done = next(d for e, d in ev if e == "response.completed")
        assert done["response"]["usage"]["total_tokens"] == 52


def test_a_hung_stream_ends_when_the_server_stops():
    m = ModelServer("hang").start()
    got: list = []
    body = {"stream": True, "tools": [{"name": "Bash"}],
            "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": ""}]}]}
    t = threading.Thread(target=lambda: got.append(post(m, "/v1/messages", body, timeout=30)))
    t.start()
    for _ in range(200):  # the request is in: its turn was recorded before the stream hangs
        if m.turns():
            break
        threading.Event().wait(0.05)
    assert [r["kind"] for r in m.turns()] == ["hang"]
    m.stop()
    t.join(20)
    assert not t.is_alive() and [e for e, _ in got[0]][:3] == ["message_start", "content_block_start",
                                                               "content_block_delta"]
