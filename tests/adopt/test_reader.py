"""One reader of the CLIs' lines (healer/loop/usage.py `Meter`), used by the governed loop on the stream it runs and by
the adoption on the transcripts it finds: spend, the CLI's own bill when higher, the session id and cwd they name."""

from __future__ import annotations

import json

from healer.adopt import _read_transcript, tool_results
from healer.loop import usage


def _lines(*objs) -> list[bytes]:
    return [json.dumps(o).encode() + b"\n" for o in objs]


def test_a_claude_code_transcript_gives_its_session_cwd_and_its_own_bill_when_higher(tmp_path):
    lines = _lines(
        {"type": "summary", "summary": "x"},
        {"type": "user", "sessionId": "s-1", "cwd": "/w", "message": {"role": "user", "content": "go"}},
        {"type": "assistant", "sessionId": "s-1", "cwd": "/w", "message": {
            "id": "m1", "model": "claude-sonnet-4-5", "usage": {"input_tokens": 1000, "output_tokens": 100}}},
        {"type": "user", "sessionId": "s-1", "cwd": "/w", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": "Exit code 1\nAssertionError: 1 != 2"},
            {"type": "tool_result", "tool_use_id": "t2", "is_error": False, "content": "ok"}]}},
        {"type": "cost-state", "totalCostUSD": 0.5})
    m = usage.Meter("claude")
    for ln in lines:
        m.feed(ln)
    assert (m.session, m.cwd) == ("s-1", "/w") and m.usd == 0.5  # its own bill, higher than 1000/100 tokens' $0.0045
    path = tmp_path / "s-1.jsonl"
    path.write_bytes(b"".join(lines))
    r = _read_transcript(str(path), "claude", None)
    assert r is not None and (r.session, r.cwd, r.usd) == ("s-1", "/w", 0.5)
    assert [s is not None for s, _l in r.tools] == [True, False] and "AssertionError" in r.tools[0][1]
    assert tool_results({"type": "assistant", "message": {"content": [{"type": "tool_result", "is_error": True}]}}) == []


def test_a_codex_session_file_and_stream_give_their_session_and_cwd():
    m = usage.Meter("codex")
    for ln in _lines({"type": "session_meta", "payload": {"id": "c-1", "cwd": "/v"}},
                     {"type": "event_msg", "payload": {"type": "token_count", "info": {"total_token_usage": {
                         "input_tokens": 10, "output_tokens": 1}}}}):
        m.feed(ln)
    assert (m.session, m.cwd) == ("c-1", "/v")
    s = usage.Meter("codex")
    s.feed(json.dumps({"type": "thread.started", "thread_id": "th-9"}))
    assert s.session == "th-9" and s.cwd is None
