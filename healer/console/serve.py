"""The console's server: uvicorn in a thread of its own, on a socket bound before it starts (port 0 picks a free
one, and the URL printed is the one that answers). `healer console` runs it alone; `healer up --console-port N`
beside the dispatcher and the supervisor, on the same store."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from healer.console import security
from healer.errors import UsageError


@dataclass
class Served:
    url: str
    server: object  # uvicorn.Server
    thread: threading.Thread
    console: object  # healer.console.app.Console
    sock: socket.socket
    on_stop: object = None  # called last (beside_up: its store connection's close)

    def stop(self, timeout: float = 10.0) -> None:
        self.console.close()  # type: ignore[attr-defined]  # streams end first: a graceful shutdown waits on them
        self.server.should_exit = True  # type: ignore[attr-defined]
        self.thread.join(timeout)
        self.sock.close()
        if callable(self.on_stop):
            self.on_stop()


def bind(host: str, port: int) -> socket.socket:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host.strip("[]"), port))
    except OSError as e:
        s.close()
        raise UsageError(f"console: cannot listen on {host}:{port}: {e.strerror or e}") from None
    s.listen(128)
    s.set_inheritable(False)
    return s


def start(root: Path, store, policy, clock, access: security.Access, *, host: str = "127.0.0.1", port: int = 0,
          runtime=None) -> Served:
    import uvicorn  # lazy: the web stack: 120 ms, only for the console

    from healer.console.app import Console, build  # lazy: pulls Starlette: 90 ms, only for the console

    sock = bind(host, port)
    c = Console(root, store, policy, clock, access, runtime=runtime)
    config = uvicorn.Config(build(c), log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=3,
                            server_header=False, date_header=False)
    server = uvicorn.Server(config)
    th = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="console", daemon=True)
    th.start()
    got = sock.getsockname()
    shown = f"[{got[0]}]" if ":" in got[0] else got[0]
    return Served(f"http://{shown}:{got[1]}/", server, th, c, sock)


def beside_up(root: Path, policy, clock, port: int, runtime=None) -> Served:
    """`healer up --console-port N`: the console in the daemons' process, on 127.0.0.1, its own connection to the same
    store (closed by `stop`), the supervisor's runtime; a token from $HEALER_CONSOLE_TOKEN when set."""
    from healer.store import open_store  # lazy: loaded by `up` already (0 ms)

    acc = security.access("127.0.0.1", None, None, False)
    store = open_store(root, clock)
    try:
        served = start(root, store, policy, clock, acc, port=port, runtime=runtime)
    except BaseException:
        store.close()
        raise
    served.on_stop = store.close
    return served
