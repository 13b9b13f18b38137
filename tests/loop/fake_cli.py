"""A stand-in for the `claude` / `codex` CLIs that prints their streaming output formats (written from the
documented formats: Claude Code's stream-json, codex-rs/exec/src/exec_events.rs, Codex's session file),
at a pace the test controls. Installed as `claude` / `codex` on PATH by tests/loop/test_spend.py.

FAKE_CLI (JSON) says what to do: turns (API turns to report), tokens (input tokens per turn), then
("exit": a final result and exit 0; "hang": print nothing more and sleep; "silent": print nothing at all
and sleep), argv_log (a file the argv is appended to, one JSON list a line), streaming (words of one more call
that streams and never ends: Claude's message_start and a text delta, Codex's reasoning item).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def out(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def claude(cfg: dict) -> None:
    model = cfg.get("model", "claude-sonnet-4-5-20250929")
    out({"type": "system", "subtype": "init", "session_id": "s-1", "model": model, "tools": ["Bash", "Edit"]})
    for i in range(1, cfg["turns"] + 1):
        mid = f"msg_{i:04d}"
        usage = {"input_tokens": cfg["tokens"], "output_tokens": 1, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 0}
        if "--include-partial-messages" in sys.argv:
            out({"type": "stream_event", "event": {"type": "message_start", "message": {"id": mid, "model": model,
                                                                                         "usage": usage}},
                 "parent_tool_use_id": None, "session_id": "s-1"})
            out({"type": "stream_event", "event": {"type": "content_block_delta", "index": 0,
                                                   "delta": {"type": "text_delta", "text": f"step {i}"}},
                 "parent_tool_use_id": None, "session_id": "s-1"})
        # one line per content block, the same message id and usage repeated, output growing (as Claude Code does)
        out({"type": "assistant", "message": {"id": mid, "type": "message", "role": "assistant", "model": model,
                                              "content": [{"type": "text", "text": f"step {i}"}], "usage": usage},
             "parent_tool_use_id": None, "session_id": "s-1"})
        out({"type": "assistant", "message": {"id": mid, "type": "message", "role": "assistant", "model": model,
                                              "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": "Bash",
                                                           "input": {"command": "true"}}],
                                              "usage": dict(usage, output_tokens=2)},
             "parent_tool_use_id": None, "session_id": "s-1"})
        if "--include-partial-messages" in sys.argv:  # the call's final output count, at its end
            out({"type": "stream_event", "event": {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                                                   "usage": {"output_tokens": cfg.get("output", 2)}},
                 "parent_tool_use_id": None, "session_id": "s-1"})
        out({"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}",
                                                                      "content": "", "is_error": False}]}})
    if cfg.get("streaming"):  # one more call, killed mid-stream: started, its words streamed, never ended
        out({"type": "stream_event", "event": {"type": "message_start", "message": {"id": "msg_open", "model": model,
                                                                                    "usage": {"input_tokens": cfg["tokens"],
                                                                                              "output_tokens": 1}}},
             "parent_tool_use_id": None, "session_id": "s-1"})
        out({"type": "stream_event", "event": {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": cfg["streaming"]}},
             "parent_tool_use_id": None, "session_id": "s-1"})
    if cfg.get("then") == "exit":
        out({"type": "result", "subtype": "success", "is_error": False, "num_turns": cfg["turns"],
             "result": cfg.get("say", "one step taken"), "session_id": "s-1",
             "total_cost_usd": cfg.get("reported_usd", 0.0)})


def codex(cfg: dict) -> None:
    if os.environ.get("CODEX_HOME"):  # the session file, as Codex keeps it under its home
        day = Path(os.environ["CODEX_HOME"]) / "sessions" / "2026" / "12" / "04"
        day.mkdir(parents=True, exist_ok=True)
        log = open(day / f"rollout-2026-12-04T00-00-00-{os.getpid()}.jsonl", "a")
    else:
        log = open(os.devnull, "w")
    out({"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"})
    out({"type": "turn.started"})
    log.write(json.dumps({"type": "turn_context", "payload": {"model": cfg.get("model", "gpt-5-codex")}}) + "\n")
    total = 0
    for i in range(1, cfg["turns"] + 1):
        total += cfg["tokens"]
        u = {"input_tokens": total, "cached_input_tokens": 0, "output_tokens": 0, "reasoning_output_tokens": 0,
             "total_tokens": total}
        log.write(json.dumps({"type": "event_msg", "payload": {"type": "token_count", "info": {
            "total_token_usage": u, "last_token_usage": dict(u, input_tokens=cfg["tokens"])}}}) + "\n")
        log.flush()
        out({"type": "item.completed", "item": {"id": f"item_{i}", "type": "command_execution", "command": "true",
                                                "aggregated_output": "", "exit_code": 0, "status": "completed"}})
    if cfg.get("streaming"):  # the model's words of a call still in flight (the Responses API bills it at its end)
        out({"type": "item.updated", "item": {"id": "item_r", "type": "reasoning", "text": cfg["streaming"]}})
    if cfg.get("then") == "exit":
        out({"type": "item.completed", "item": {"id": "item_x", "type": "agent_message", "text": cfg.get("say", "ok")}})
        out({"type": "turn.completed", "usage": {"input_tokens": total, "cached_input_tokens": 0, "output_tokens": 0}})


def main() -> None:
    cfg = json.loads(os.environ["FAKE_CLI"])
    if cfg.get("argv_log"):
        with open(cfg["argv_log"], "a") as f:
            f.write(json.dumps(sys.argv) + "\n")
    sys.stdin.read() if not sys.stdin.isatty() else None
    if cfg.get("then") != "silent":
        (claude if globals().get("CLI", Path(sys.argv[0]).name) == "claude" else codex)(cfg)
    if cfg.get("then") in ("hang", "silent"):
        time.sleep(3600)


if __name__ == "__main__":
    main()
