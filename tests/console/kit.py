"""What the console tests share: a fleet with a real store, the console as a Starlette TestClient or as a real
uvicorn server on 127.0.0.1:0, a CSRF token read from a page, and a server-sent-events reader over a real socket."""

from __future__ import annotations

import http.client
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

from healer.clock import system
from healer.console import security
from healer.policy.schema import Policy
from healer.store import open_store
from tests.conftest import make_repo

POLICY = {"notify": {"notifiers": [{"kind": "jsonl", "path": ".healer/notifications.jsonl"}]}, "loop": {"kill_grace": "1s"}}
CSRF_FIELD = re.compile(r'name="csrf" value="([^"]+)"')


def make_fleet(tmp_path: Path):
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir(exist_ok=True)
    return root, open_store(root), Policy.model_validate(POLICY)


def client(root: Path, store, policy, *, read_only: bool = False, token: str | None = None, operator: str = "alice"):
    from starlette.testclient import TestClient

    from healer.console.app import Console, build

    c = Console(root, store, policy, system(), security.Access(token, operator, read_only))
    return TestClient(build(c), base_url="http://127.0.0.1"), c


def csrf(tc, path: str = "/", **kw) -> str:
    """A page's CSRF token; the client keeps its cookie (double submit)."""
    r = tc.get(path, **kw)
    assert r.status_code == 200, r.text[:300]
    m = CSRF_FIELD.search(r.text)
    assert m, "no steering form on the page"
    return m.group(1)


class SSE:
    """A server-sent-events client on a real socket: a reader thread puts each (event, data) in a list."""

    def __init__(self, url: str, headers: dict | None = None) -> None:
        u = urlparse(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        self.conn.request("GET", u.path + (f"?{u.query}" if u.query else ""), headers={"Accept": "text/event-stream", **(headers or {})})
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200, self.resp.status
        self.got: list[tuple[str, str]] = []
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _lines(self) -> Iterator[str]:
        while True:
            line = self.resp.readline()
            if not line:
                return
            yield line.decode("utf-8", "replace").rstrip("\r\n")

    def _read(self) -> None:
        event, data = "message", []
        try:
            for line in self._lines():
                if line == "":
                    if data:
                        with self.cond:
                            self.got.append((event, "\n".join(data)))
                            self.cond.notify_all()
                    event, data = "message", []
                elif line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:][1:] if line[5:].startswith(" ") else line[5:])
        except (OSError, ValueError, AttributeError):  # closed under the reader (http.client drops its fp)
            pass

    def wait(self, pred, timeout: float = 30.0):
        """The first (event, data) matching pred, waiting for it (a condition variable, no sleep)."""
        with self.cond:
            ok = self.cond.wait_for(lambda: any(pred(ev, d) for ev, d in self.got), timeout)
            assert ok, f"no matching server-sent event in {timeout}s; got {self.got[-5:]}"
            return next((ev, d) for ev, d in self.got if pred(ev, d))

    def fleet(self) -> list[dict]:
        with self.cond:
            return [json.loads(d) for ev, d in self.got if ev == "fleet"]

    def close(self) -> None:
        try:
            self.conn.sock.shutdown(2)  # type: ignore[union-attr]
        except OSError:
            pass
        self.thread.join(10)
        self.conn.close()
