"""Learn of a child's exit the moment it happens, so the dispatcher reaps within the second.

`ExitWatch` holds a pidfd per watched process (Linux >= 5.3) in one selector thread; a pidfd
turns readable when its process exits, and the callback (the dispatcher's wake) runs at once.
Nothing is reaped here: the runtime still collects the exit code through `Popen`, so the
status path is the same whether a tick was woken or came on its schedule. Where pidfds are
missing, a thread per child waits with `waitid(WNOWAIT)` (also without reaping).
"""

from __future__ import annotations

import os
import selectors
import threading
from collections.abc import Callable

from loguru import logger


class ExitWatch:
    def __init__(self, on_exit: Callable[[int], None]) -> None:
        self.on_exit = on_exit
        self._sel = selectors.DefaultSelector()
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        self._sel.register(self._r, selectors.EVENT_READ, None)
        self._add: list[int] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def watch(self, pid: int) -> None:
        if not hasattr(os, "pidfd_open"):
            threading.Thread(target=self._waitid, args=(pid,), daemon=True, name=f"exit-{pid}").start()
            return
        with self._lock:
            self._add.append(pid)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="exit-watch")
                self._thread.start()
        os.write(self._w, b"x")

    def _waitid(self, pid: int) -> None:
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            pass  # reaped elsewhere already, or not our child: either way it ended (or is not ours to watch)
        except OSError:
            return
        self._fire(pid)

    def _fire(self, pid: int) -> None:
        try:
            self.on_exit(pid)
        except Exception:  # noqa: BLE001 - a wake that fails costs latency (the tick still reaps), never the watcher
            logger.exception("exit callback for pid {} failed", pid)

    def _register(self) -> None:
        with self._lock:
            pids, self._add = self._add, []
        for pid in pids:
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                self._fire(pid)  # already gone
                continue
            except OSError as e:
                logger.debug("pidfd_open({}) failed: {}; the tick will reap it", pid, e)
                continue
            self._sel.register(fd, selectors.EVENT_READ, pid)

    def _run(self) -> None:
        while not self._closed:
            for key, _ in self._sel.select():
                if key.data is None:
                    try:
                        os.read(self._r, 4096)
                    except BlockingIOError:
                        pass
                    self._register()
                    continue
                self._sel.unregister(key.fd)
                os.close(key.fd)
                self._fire(key.data)

    def close(self) -> None:
        self._closed = True
        try:
            os.write(self._w, b"x")
        except OSError:
            pass
