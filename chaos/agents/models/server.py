"""A scripted model on 127.0.0.1 that speaks both wires the real CLIs use, streaming (SSE).

  POST /v1/messages    Anthropic Messages API (Claude Code with ANTHROPIC_BASE_URL=http://HOST:PORT)
  POST /v1/responses   OpenAI Responses API (Codex with a model_provider whose base_url is http://HOST:PORT/v1
                       and wire_api = "responses")

The answer is the script's turn for this conversation (chaos/agents/models/scripts.py), chosen by the
number of tool results in the request. Requests without tools (Claude Code's side calls: titles, quota
checks) get a short text. Every request is appended to `requests` (method, path, wire, turn, tool names)
so a test can see what the CLI asked. `stop()` ends every stream still open, the hung ones included.

The wire formats follow the public API references and the CLIs' own parsers:
- Messages: message_start (usage.input_tokens), content_block_start/delta/stop (text_delta,
  input_json_delta for a tool_use block), message_delta (stop_reason, usage.output_tokens), message_stop.
- Responses: response.created, response.output_item.added/done (a `message` with output_text, or a
  `function_call` / `custom_tool_call`), response.output_text.delta, response.completed with
  response.usage {input_tokens, input_tokens_details.cached_tokens, output_tokens,
  output_tokens_details.reasoning_tokens, total_tokens}. Codex treats a stream that ends without
  response.completed as an error and retries (stream_max_retries): the kit's config sets it to 0.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from chaos.agents.models.scripts import PLANTED, Script, Turn, build

_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):06d}"


class ModelServer:
    """One scripted model. `with ModelServer(script) as m:` then m.anthropic_url / m.openai_url."""

    def __init__(self, script: Script | str, host: str = "127.0.0.1", port: int = 0, *, fail: int | None = 0,
                 fail_status: int = 529, **params) -> None:
        self.script = build(script, **params) if isinstance(script, str) else script
        # an endpoint that is down: the first `fail` model requests (None: every one) answer `fail_status`
        # (529 overloaded, 500, 429 ...) with the API's error body, as an overloaded or failing provider does
        self.fail, self.fail_status, self.failed = fail, fail_status, 0
        self.requests: list[dict] = []
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer((host, port), _handler(self))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="model-server", daemon=True)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ModelServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def turns(self, wire: str | None = None) -> list[dict]:
        """The scripted (tool-offering) requests seen, in order."""
        with self.lock:
            return [r for r in self.requests if r["scripted"] and (wire is None or r["wire"] == wire)]

    def record(self, entry: dict) -> None:
        with self.lock:
            self.requests.append(entry)

    def failing(self) -> bool:
        """This model request is one the endpoint fails (counted)."""
        with self.lock:
            if self.fail is not None and self.failed >= self.fail:
                return False
            self.failed += 1
            return True


def _handler(model: ModelServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet: the requests list is the log
            pass

        def _body(self) -> dict:
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            if self.headers.get("Content-Encoding") == "zstd":
                raise ValueError("zstd request bodies are not supported: disable compression")
            try:
                return json.loads(raw or b"{}")
            except ValueError:
                return {}

        def _json(self, code: int, obj: dict) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # model lists and the like: nothing to offer
            path = self.path.split("?")[0]
            model.record({"method": "GET", "path": path, "wire": "", "scripted": False})
            if path.endswith("/models"):
                self._json(200, {"object": "list", "data": [], "models": []})
                return
            self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": f"no {path} here"}})

        def do_HEAD(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            path = self.path.split("?")[0]
            body = self._body()
            if path.endswith(("/messages", "/responses")) and model.failing():
                model.record({"method": "POST", "path": path, "wire": "", "scripted": False, "failed": model.fail_status})
                kind = {529: "overloaded_error", 429: "rate_limit_error"}.get(model.fail_status, "api_error")
                self._json(model.fail_status, {"type": "error", "error": {"type": kind, "message": "scripted outage"}})
                return
            if path.endswith("/messages/count_tokens"):
                model.record({"method": "POST", "path": path, "wire": "anthropic", "scripted": False})
                self._json(200, {"input_tokens": 100})
            elif path.endswith("/messages"):
                _Anthropic(self, model, body).answer()
            elif path.endswith("/responses"):
                _Responses(self, model, body).answer()
            else:
                model.record({"method": "POST", "path": path, "wire": "", "scripted": False})
                self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": f"no {path} here"}})

    return Handler


class _Stream:
    """One answer as server-sent events on a connection that closes when it ends."""

    wire = ""

    def __init__(self, h: BaseHTTPRequestHandler, model: ModelServer, body: dict) -> None:
        self.h, self.model, self.body = h, model, body
        self.stream = bool(body.get("stream", True))

    def open(self) -> None:
        self.h.send_response(200)
        self.h.send_header("Content-Type", "text/event-stream")
        self.h.send_header("Cache-Control", "no-cache")
        self.h.send_header("Connection", "close")
        self.h.end_headers()
        self.h.close_connection = True

    def event(self, name: str, data: dict) -> None:
        self.h.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        self.h.wfile.flush()

    def hang(self) -> None:
        """Keep the connection open, silent, until the server stops (or the client goes away)."""
        while not self.model.stopping.wait(0.5):
            pass

    def wait(self, t: Turn) -> bool:
        return not (t.delay and self.model.stopping.wait(t.delay))

    def fill(self, turn: Turn) -> Turn:
        """`{match}` in the turn: what the script's pattern finds in the conversation (e.g. the ticket's file)."""
        pat = self.model.script.params.get("pattern")
        if not pat or "{match}" not in turn.arg:
            return turn
        m = re.search(pat, json.dumps(self.body))
        return Turn(turn.kind, turn.arg.replace("{match}", m.group(1) if m else "unknown.txt"), turn.content,
                    turn.usage, turn.delay)

    def cwd(self, text: str) -> str | None:
        m = re.search(r"(?:Working directory|Primary working directory|<cwd>)\s*:?\s*(/[^\s<\\\"']+)", text)
        return m.group(1) if m else None


class _Anthropic(_Stream):
    wire = "anthropic"

    def answer(self) -> None:
        b = self.body
        tools = [t.get("name") for t in b.get("tools") or []]
        results = sum(1 for m in b.get("messages") or [] if m.get("role") == "user" and isinstance(m.get("content"), list)
                      for c in m["content"] if isinstance(c, dict) and c.get("type") == "tool_result")
        scripted = "Bash" in tools
        turn = self.fill(self.model.script.turn(results)) if scripted else Turn("text", "ok", usage=(10, 1))
        self.model.record({"method": "POST", "path": self.h.path, "wire": self.wire, "scripted": scripted,
                           "turn": results, "kind": turn.kind, "tools": tools, "model": b.get("model"),
                           "planted": PLANTED in json.dumps(b)})
        if not self.wait(turn):
            return
        model_name = b.get("model") or "claude-sonnet-4-5"
        usage_in, usage_out = turn.usage
        block: dict
        if turn.kind in ("shell", "background"):
            block = {"type": "tool_use", "id": _id("toolu"), "name": "Bash",
                     "input": {"command": turn.arg, "description": "scripted step",
                               **({"run_in_background": True} if turn.kind == "background" else {})}}
        elif turn.kind in ("read", "write"):
            system = b.get("system")
            stext = system if isinstance(system, str) else json.dumps(system)
            where = self.cwd(stext + json.dumps(b.get("messages") or []))
            path = turn.arg if turn.arg.startswith("/") or not where else f"{where}/{turn.arg}"
            block = {"type": "tool_use", "id": _id("toolu"), "name": "Read", "input": {"file_path": path}}
            if turn.kind == "write":
                block = {**block, "name": "Write", "input": {"file_path": path, "content": turn.content}}
        else:
            block = {"type": "text", "text": turn.arg}
        stop = "tool_use" if block["type"] == "tool_use" else "end_turn"
        msg_id = _id("msg")
        if not self.stream:
            self.h._json(200, {"id": msg_id, "type": "message", "role": "assistant", "model": model_name,
                               "content": [block], "stop_reason": stop, "stop_sequence": None,
                               "usage": {"input_tokens": usage_in, "output_tokens": usage_out}})
            return
        self.open()
        self.event("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model_name, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": usage_in, "output_tokens": 1, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0}}})
        if turn.kind == "hang":
            self.event("content_block_start", {"type": "content_block_start", "index": 0,
                                               "content_block": {"type": "text", "text": ""}})
            self.event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": turn.arg}})
            self.hang()
            return
        if block["type"] == "text":
            self.event("content_block_start", {"type": "content_block_start", "index": 0,
                                               "content_block": {"type": "text", "text": ""}})
            self.event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": block["text"]}})
        else:
            self.event("content_block_start", {"type": "content_block_start", "index": 0,
                                               "content_block": {**block, "input": {}}})
            self.event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "input_json_delta",
                                                         "partial_json": json.dumps(block["input"])}})
        self.event("content_block_stop", {"type": "content_block_stop", "index": 0})
        self.event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": usage_out}})
        self.event("message_stop", {"type": "message_stop"})


SHELL_TOOLS = ("shell", "shell_command", "exec_command", "local_shell")


class _Responses(_Stream):
    wire = "openai"

    def answer(self) -> None:
        b = self.body
        tools = [t.get("name") or t.get("type") for t in b.get("tools") or []]
        items = b.get("input") or []
        results = sum(1 for i in items if isinstance(i, dict) and str(i.get("type", "")).endswith("_call_output"))
        scripted = any(t in SHELL_TOOLS for t in tools)
        turn = self.fill(self.model.script.turn(results)) if scripted else Turn("text", "ok", usage=(10, 1))
        self.model.record({"method": "POST", "path": self.h.path, "wire": self.wire, "scripted": scripted,
                           "turn": results, "kind": turn.kind, "tools": tools, "model": b.get("model"),
                           "planted": PLANTED in json.dumps(b)})
        if not self.wait(turn):
            return
        if turn.kind == "write":
            # apply_patch replaces a file only from its exact old lines: the kit writes through the shell
            # (creating its folder, as Claude's Write does)
            turn = Turn("shell", f"mkdir -p \"$(dirname {turn.arg})\" && cat > {turn.arg} <<'HEALER_KIT_EOF'\n"
                                 f"{turn.content}HEALER_KIT_EOF", usage=turn.usage)
        elif turn.kind == "read":
            turn = Turn("shell", f"cat {turn.arg}", usage=turn.usage)
        elif turn.kind == "background":
            turn = Turn("shell", f"nohup {turn.arg} >/dev/null 2>&1 & echo started", usage=turn.usage)
        rid = _id("resp")
        self.open()
        self.event("response.created", {"type": "response.created", "response": {"id": rid}})
        usage_in, usage_out = turn.usage
        if turn.kind in ("text", "hang"):
            mid = _id("msg")
            self.event("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": {
                "type": "message", "id": mid, "role": "assistant", "content": []}})
            self.event("response.output_text.delta", {"type": "response.output_text.delta", "item_id": mid,
                                                      "output_index": 0, "content_index": 0, "delta": turn.arg})
            if turn.kind == "hang":
                self.hang()
                return
            item = {"type": "message", "id": mid, "role": "assistant",
                    "content": [{"type": "output_text", "text": turn.arg, "annotations": []}]}
        else:
            item = self._tool_call(tools, turn.arg)
            self.event("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                                      "item": item})
        self.event("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item})
        self.event("response.completed", {"type": "response.completed", "response": {
            "id": rid, "usage": {"input_tokens": usage_in, "input_tokens_details": {"cached_tokens": 0},
                                 "output_tokens": usage_out, "output_tokens_details": {"reasoning_tokens": 0},
                                 "total_tokens": usage_in + usage_out}}})

    @staticmethod
    def _tool_call(tools: list, cmd: str) -> dict:
        call = _id("call")
        if "shell_command" in tools:
            args = {"command": cmd}
            name = "shell_command"
        elif "exec_command" in tools:
            args, name = {"cmd": cmd}, "exec_command"
        else:
            args, name = {"command": ["bash", "-lc", cmd]}, "shell"
        return {"type": "function_call", "id": _id("fc"), "call_id": call, "name": name, "arguments": json.dumps(args)}
