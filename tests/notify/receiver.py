"""A real HTTP receiver on 127.0.0.1 that can answer, fail with a status, be slow, or hang."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """`script`: one entry per request, then `then` for the rest: an int status, ("slow", seconds[, status]) or "hang"."""

    def __init__(self, script=(), then=200, port: int = 0):
        self.script = list(script)
        self.then = then
        self.got: list[tuple[dict, dict]] = []  # answered 2xx: (body, headers)
        self.hits = 0
        self.release = threading.Event()
        self.lock = threading.Lock()
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with outer.lock:
                    outer.hits += 1
                    step = outer.script.pop(0) if outer.script else outer.then
                code = 200
                if step == "hang":
                    outer.release.wait(120)
                    return
                if isinstance(step, tuple):
                    outer.release.wait(step[1])
                    code = step[2] if len(step) > 2 else 200
                else:
                    code = step
                if 200 <= code < 300:
                    with outer.lock:
                        outer.got.append((json.loads(body), dict(self.headers)))
                try:
                    self.send_response(code)
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:
                    pass  # the client gave up first

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), H)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def keys(self) -> list[str]:
        """Idempotency keys of the accepted requests (a receiver de-duplicates on these)."""
        with self.lock:
            return [h.get("Idempotency-Key") for _, h in self.got]

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
