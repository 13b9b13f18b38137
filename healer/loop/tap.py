"""The agent's stdout read as it streams (the shell around healer/loop/usage.py's Meter).

The agent writes into a pipe; a reader thread copies every byte into the iteration's `agent.out`
(kept as before) and feeds whole lines to the Meter, so spend is known turn by turn while the agent
runs, and a kill at the deadline loses nothing already reported. The thread also remembers when the
last byte came (the idle deadline) and wakes the runner's wait the moment a turn takes the run over
its cap (one byte into the runner's wake-up pipe), so the agent is stopped within that turn.

Every captured stream (the agent's stdout and stderr, each gate's log) goes through a Tap, and its file
keeps at most `cap` bytes (loop.output_cap): the first half as it comes, the last half in a ring in
memory written after a marker line when the stream ends (`Capped`). The Meter still sees every line,
whatever the file keeps; a runner killed mid-stream leaves the head only on disk.

The agent's stdout also carries the CLI's final event (usage.FINAL): the tap notes when it came
(`result_at`), so that a CLI that keeps running after it is ended after loop.agent.after_result_grace.

Codex reports tokens on stdout only when its turn ends; its session file under the agent's
CODEX_HOME has one token count per API call: `follow_codex` reads what was appended to it since the
last look (called from the runner's wait, about once a second, and once more at the end).
"""

from __future__ import annotations

import fcntl
import os
import select
import stat
import struct
import termios
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

from healer.loop.usage import LineBuffer, Meter, Turn

MARKER = "\n[healer: {cut} bytes cut here (loop.output_cap {cap}: the first {head} and the last {tail} of {total} kept)]\n"


class Capped:
    """A captured stream's file holding at most `cap` bytes of it: the head written as it comes, the tail kept in a
    ring of the reads (at most cap/2 bytes and one read in memory), written after a marker line by `close`.
    `cap` None: everything, as it comes."""

    def __init__(self, f, cap: int | None) -> None:
        self.f = f  # binary
        self.cap = cap
        self.tail_cap = (cap // 2) if cap is not None else 0
        self.head_left = (cap - self.tail_cap) if cap is not None else -1
        self.ring: deque[bytes] = deque()
        self.ring_bytes = 0
        self.total = 0
        self.cut = 0

    def write(self, data: bytes) -> None:
        self.total += len(data)
        if self.head_left < 0:
            self._put(data)
            return
        if self.head_left > 0:
            head, data = data[:self.head_left], data[self.head_left:]
            self.head_left -= len(head)
            self._put(head)
        if not data:
            return
        self.ring.append(data)
        self.ring_bytes += len(data)
        while self.ring and self.ring_bytes - len(self.ring[0]) >= self.tail_cap:
            self.cut += len(self.ring[0])
            self.ring_bytes -= len(self.ring.popleft())

    def close(self) -> None:
        """The marker (when something was cut) and the tail, once the stream has ended."""
        tail = b"".join(self.ring)
        self.ring.clear()
        extra = len(tail) - self.tail_cap
        if extra > 0:
            tail, self.cut = tail[extra:], self.cut + extra
        if self.cut and self.cap is not None:
            self._put(MARKER.format(cut=self.cut, cap=self.cap, head=self.cap - self.tail_cap, tail=len(tail),
                                    total=self.total).encode())
        self._put(tail)

    def _put(self, data: bytes) -> None:
        try:
            self.f.write(data)
        except (OSError, ValueError):  # a full disk: the run's own writes will say so; the count goes on
            pass

    def truncated(self) -> dict | None:
        """What was cut, for the loop.output_truncated event; None when the file holds the whole stream."""
        if not self.cut:
            return None
        return {"bytes": self.total, "kept": self.total - self.cut, "cut": self.cut, "cap": self.cap}


class Tap:
    """A pipe the program writes into, copied to `out_file` (at most `cap` bytes: Capped) by a thread; with a
    `meter` (the agent's stdout) every whole line is also fed to it."""

    def __init__(self, out_file, meter: Meter | None, now: Callable[[], float],
                 on_turns: Callable[[list[Turn]], None] | None = None, cap: int | None = None,
                 name: str = "agent-stdout") -> None:
        self.out = out_file  # binary, the iteration's agent.out (agent.err, a gate's log)
        self.file = Capped(out_file, cap)
        self.meter = meter
        self.now = now
        self.on_turns = on_turns
        self.lock = threading.Lock()  # the Meter is read by the runner while the thread feeds it
        self.r, self.w = os.pipe()
        self.last_output = now()
        self.result_at: float | None = None  # when the CLI's final event came on stdout (usage.FINAL)
        self.bytes = 0
        self._stop = False
        self._finished = False
        self.io_lock = threading.Lock()
        self._wrote = threading.Event()
        self._thread = threading.Thread(target=self._pump, name=name, daemon=True)
        self._codex: dict[str, tuple[int, LineBuffer]] = {}

    @property
    def writer(self) -> int:
        return self.w

    def start(self) -> Tap:
        self._thread.start()
        return self

    def spent(self) -> float:
        if self.meter is None:
            return 0.0
        with self.lock:
            return self.meter.usd

    def _feed(self, lines: list[bytes], stdout: bool = True) -> None:
        if self.meter is None:
            return
        new: list[Turn] = []
        with self.lock:  # the callback too: it reads the Meter, which the runner's thread may feed (follow_codex)
            for ln in lines:
                new += self.meter.feed(ln)
            # only the CLI's own stream ends its run: a line in Codex's session file never does
            if stdout and self.result_at is None and self.meter.results:
                self.result_at = self.now()
            if new and self.on_turns is not None:
                self.on_turns(new)

    def _pump(self) -> None:
        buf = LineBuffer()
        poller = select.poll()
        poller.register(self.r, select.POLLIN | select.POLLHUP)
        while not self._stop:
            if not poller.poll(200):
                continue
            with self.io_lock:  # a read and its write, as one step for sync()
                try:
                    data = os.read(self.r, 1 << 16)
                except OSError:
                    break
                if not data:
                    break
                self.last_output = self.now()
                self.bytes += len(data)
                self.file.write(data)
            self._wrote.set()
            if self.meter is not None:
                self._feed(buf.push(data))
        self._feed(buf.flush())
        self.file.close()

    def finish(self, wait: float = 2.0) -> None:
        """After the program's tree is gone: close our end for writing, drain what is left, write the kept tail,
        stop. A process that escaped the tree and still holds the pipe cannot keep the runner here past `wait`.
        Called again, nothing more happens."""
        if self._finished:
            return
        self._finished = True
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

    def sync(self, tries: int = 200) -> None:
        """The program has ended: wait until what it left in the pipe is in the file (its head), e.g. before the
        sandbox reads bwrap's own error line back. The pipe stays open (a sandbox may start the program again);
        a process that escaped and still writes cannot keep the runner here past `tries` short waits."""
        for _ in range(tries):
            if self._finished:
                return
            self._wrote.clear()
            with self.io_lock:
                if _pending(self.r) == 0:
                    return
            self._wrote.wait(0.01)

    def truncated(self) -> dict | None:
        return self.file.truncated()

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
                self._feed(buf.push(data), stdout=False)


def _pending(fd: int) -> int:
    """Bytes waiting in a pipe (0 when it cannot be asked: closed)."""
    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0


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
