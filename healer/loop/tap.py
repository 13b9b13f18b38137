"""The agent's stdout read as it streams (the shell around healer/loop/usage.py's Meter).

The agent writes into a pipe; a reader thread copies every byte into the iteration's `agent.out`
(kept as before) and feeds whole lines to the Meter, so spend is known turn by turn while the agent
runs, and a kill at the deadline loses nothing already reported. The thread also remembers when the
last byte came (the idle deadline) and wakes the runner's wait the moment a turn takes the run over
its cap (one byte into the runner's wake-up pipe), so the agent is stopped within that turn.

Codex reports tokens on stdout only when its turn ends; its session file under the agent's
CODEX_HOME has one token count per API call: `follow_codex` reads what was appended to it since the
last look (called from the runner's wait, about once a second, and once more at the end).
"""

from __future__ import annotations

import os
import select
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from healer.loop.usage import LineBuffer, Meter, Turn


class Tap:
    def __init__(self, out_file, meter: Meter, now: Callable[[], float],
                 on_turns: Callable[[list[Turn]], None] | None = None) -> None:
        self.out = out_file  # binary, the iteration's agent.out
        self.meter = meter
        self.now = now
        self.on_turns = on_turns
        self.lock = threading.Lock()  # the Meter is read by the runner while the thread feeds it
        self.r, self.w = os.pipe()
        self.last_output = now()
        self.bytes = 0
        self._stop = False
        self._thread = threading.Thread(target=self._pump, name="agent-stdout", daemon=True)
        self._codex: dict[str, tuple[int, LineBuffer]] = {}

    @property
    def writer(self) -> int:
        return self.w

    def start(self) -> Tap:
        self._thread.start()
        return self

    def spent(self) -> float:
        with self.lock:
            return self.meter.usd

    def _feed(self, lines: list[bytes]) -> None:
        new: list[Turn] = []
        with self.lock:  # the callback too: it reads the Meter, which the runner's thread may feed (follow_codex)
            for ln in lines:
                new += self.meter.feed(ln)
            if new and self.on_turns is not None:
                self.on_turns(new)

    def _pump(self) -> None:
        buf = LineBuffer()
        poller = select.poll()
        poller.register(self.r, select.POLLIN | select.POLLHUP)
        while not self._stop:
            if not poller.poll(200):
                continue
            try:
                data = os.read(self.r, 1 << 16)
            except OSError:
                break
            if not data:
                break
            self.last_output = self.now()
            self.bytes += len(data)
            try:
                self.out.write(data)
            except (OSError, ValueError):  # a full disk: the run's own writes will say so; the count goes on
                pass
            self._feed(buf.push(data))
        self._feed(buf.flush())

    def finish(self, wait: float = 2.0) -> None:
        """After the agent's tree is gone: close our end for writing, drain what is left, stop. A process
        that escaped the tree and still holds the pipe cannot keep the runner here past `wait`."""
        if self.w >= 0:
            os.close(self.w)
            self.w = -1
        self._thread.join(wait)
        self._stop = True
        self._thread.join(1.0)
        if not self._thread.is_alive():
            os.close(self.r)
        try:
            self.out.flush()
        except (OSError, ValueError):
            pass

    def close_writer_in_parent(self) -> None:
        """Once the agent holds the pipe: the runner's copy of the write end is closed so the agent's
        exit (and its tree's) is the end of the stream."""
        if self.w >= 0:
            os.close(self.w)
            self.w = -1

    # -- Codex's session file ----------------------------------------------------------
    def follow_codex(self, codex_home: str | None, since: float) -> None:
        """Feed what Codex appended to its session files (modified after `since`, wall time) since the last call."""
        if not codex_home:
            return
        for p in _rollouts(Path(codex_home) / "sessions", since):
            key = str(p)
            off, buf = self._codex.get(key, (0, LineBuffer()))
            data = _read_from(p, off, 8 << 20)
            self._codex[key] = (off + len(data), buf)
            if data:
                self._feed(buf.push(data))


def _names(d: Path, cap: int = 1000) -> list[str]:
    """At most `cap` names of a folder (the agent writes there: a million files must not cost a second a look)."""
    out: list[str] = []
    try:
        with os.scandir(d) as it:
            for e in it:
                if len(out) >= cap:
                    break
                if not e.is_symlink():
                    out.append(e.name)
    except OSError:
        pass
    return sorted(out)


def _rollouts(root: Path, since: float) -> list[Path]:
    """Codex's session files of the last days (sessions/YYYY/MM/DD/rollout-*.jsonl) written since `since`."""
    found = []
    for y in _names(root)[-2:]:
        for m in _names(root / y)[-2:]:
            for d in _names(root / y / m)[-3:]:
                for f in _names(root / y / m / d):
                    if f.startswith("rollout-") and f.endswith(".jsonl"):
                        p = root / y / m / d / f
                        try:
                            st = os.lstat(p)
                        except OSError:
                            continue
                        if stat.S_ISREG(st.st_mode) and st.st_mtime >= since - 1:
                            found.append(p)
    return found[-4:]


def _read_from(p: Path, off: int, cap: int) -> bytes:
    """Up to `cap` bytes of a plain file from `off`, never through a link (the agent owns the folder)."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        os.lseek(fd, off, os.SEEK_SET)
        return os.read(fd, cap)
    except OSError:
        return b""
    finally:
        os.close(fd)
