"""The one place that reads time.

Every other module is handed a `Clock`. `SystemClock` reads the machine's clocks;
`VirtualClock` is moved by hand (tests, simulation, replay), so hours of fleet life
can pass in microseconds and every decision stays a pure function of `now`.
A test (tests/test_clock_only.py) fails if another module reads time directly.

$HEALER_CLOCK_OFFSET_FILE (game days, chaos/faults/real_world.py's clock_jump): the system clock's wall
time plus the seconds written in that file, re-read at most every 50 ms, so every process of a game day
sees one wall-clock jump at once while monotonic time goes on. Unset (always, outside game days): no cost.
"""

from __future__ import annotations

import os
import threading
import time as _time

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing (its start-up is most of a short run's CPU)
if TYPE_CHECKING:
    from typing import Protocol
else:
    Protocol = object  # a Protocol for the type checker (Makefile's MYPY_PORTS), a plain class at run time


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock time, seconds since the epoch (what the store records)."""

    def monotonic(self) -> float:
        """A clock that never goes back, for deadlines."""

    def sleep(self, seconds: float) -> None: ...


def _uptime() -> float | None:
    """The kernel's seconds since boot (/proc/uptime): no library preloaded into this process can move it."""
    try:
        with open("/proc/uptime", "rb") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class SystemClock:
    """The machine's clocks. `monotonic()` is CLOCK_MONOTONIC on the base of the kernel's /proc/uptime (seconds since
    boot, the same for every process of the host) with any step taken out: a library that fakes this process's time
    (libfaketime moves CLOCK_MONOTONIC with the wall clock) or anything else that makes it jump against /proc/uptime
    is corrected at the first read after (checked every STEADY_CHECK seconds, and at once when it went back or leapt
    past the next check), so durations, periods and deadlines stay true. Without /proc/uptime: CLOCK_MONOTONIC."""

    SHARED_MONOTONIC = True  # monotonic() counts from the host's boot: readings of two processes compare
    STEADY_CHECK = 0.5  # seconds of monotonic time between two looks at /proc/uptime
    STEP = 1.0  # a change of (uptime - monotonic) beyond this is a step (uptime ticks every 10 ms)
    _base: float | None = None  # uptime - CLOCK_MONOTONIC at the last look
    _shift = 0.0  # added to CLOCK_MONOTONIC: the steps taken out so far
    _steady_at = float("-inf")  # CLOCK_MONOTONIC at the last look
    _steady_lock = threading.Lock()

    def now(self) -> float:
        return _time.time()

    def monotonic(self) -> float:
        m = _time.monotonic()
        if not 0.0 <= m - self._steady_at < self.STEADY_CHECK:
            self._steady(m)
        return m + self._shift

    def steady(self) -> float:
        """`monotonic()`, checked against the kernel now (trusted time's reading: healer/core/trusted_time.py)."""
        m = _time.monotonic()
        self._steady(m)
        return m + self._shift

    def _steady(self, m: float) -> None:
        with self._steady_lock:
            self._steady_at = m
            up = _uptime()
            if up is None:
                return
            base = up - m
            if self._base is None:
                self._shift = base  # on the kernel's count since boot: one base for every process of this host
            elif abs(base - self._base) > self.STEP:
                self._shift += base - self._base
            self._base = base

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            _time.sleep(seconds)


class VirtualClock:
    """A clock that only moves when told to. `sleep` advances it instantly."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._t = float(start)
        self._mono = 0.0
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._t

    def monotonic(self) -> float:
        return self._mono

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a virtual clock only moves forward; use jump() for a wall-clock jump")
        with self._lock:
            self._t += seconds
            self._mono += seconds

    def jump(self, seconds: float) -> None:
        """Move wall time only (NTP step, suspended VM); monotonic time is unaffected."""
        with self._lock:
            self._t += seconds

    def set(self, t: float) -> None:
        with self._lock:
            if t > self._t:
                self._mono += t - self._t
            self._t = float(t)


def reading(clock: Clock) -> tuple[float, float]:
    """(wall, monotonic), read together: durations a process measures itself use the second; a difference between
    how far each moved is a wall-clock jump (healer/core/trusted_time.py). The monotonic reading is checked against
    the kernel first (SystemClock.steady) where the clock can."""
    steady = getattr(clock, "steady", None)
    return clock.now(), (steady() if steady is not None else clock.monotonic())


class Every:
    """A period on the monotonic clock (the `schedule` library's runs on the wall clock: a step back stalls it for
    the step's size, a step forward makes every job overdue). `due()` is True once a period has passed since the
    last time it was True (or since the start), measured from then."""

    def __init__(self, clock: Clock, period: float) -> None:
        self.clock = clock
        self.period = float(period)
        self.next = clock.monotonic() + self.period

    def due(self) -> bool:
        m = self.clock.monotonic()
        if m < self.next:
            return False
        self.next = m + self.period
        return True

    def idle(self) -> float:
        """Seconds until the next period is due (0: due now)."""
        return max(0.0, self.next - self.clock.monotonic())


def _utc(t: float) -> tuple[_time.struct_time, int]:
    """(UTC calendar fields, microseconds) of an epoch time, as `datetime.fromtimestamp(t, UTC)` splits it:
    the fraction rounded half-even to the microsecond, carried into the seconds. `datetime` itself costs
    `healer loop run` a millisecond of start-up for three formats (tests/spine/test_clock.py compares them)."""
    whole = int(t)
    us = round((t - whole) * 1e6)
    if us >= 1_000_000:
        whole, us = whole + 1, us - 1_000_000
    elif us < 0:
        whole, us = whole - 1, us + 1_000_000
    tm = _time.gmtime(whole)
    if not 1 <= tm.tm_year <= 9999:
        raise ValueError(f"year {tm.tm_year} is out of range")
    return tm, us


def iso(t: float) -> str:
    """Render an epoch time as ISO 8601 UTC (for humans and reports)."""
    tm, _us = _utc(t)
    return (f"{tm.tm_year:04d}-{tm.tm_mon:02d}-{tm.tm_mday:02d}T{tm.tm_hour:02d}:{tm.tm_min:02d}:{tm.tm_sec:02d}"
            "+00:00")


def stamp(t: float) -> str:
    """A filesystem-safe UTC timestamp, sortable (e.g. quarantine folders)."""
    tm, us = _utc(t)
    return (f"{tm.tm_year:04d}{tm.tm_mon:02d}{tm.tm_mday:02d}T{tm.tm_hour:02d}{tm.tm_min:02d}{tm.tm_sec:02d}"
            f".{us:06d}Z")


def day_of(t: float) -> str:
    """The UTC calendar day of an epoch time (daily caps)."""
    tm, _us = _utc(t)
    return f"{tm.tm_year:04d}-{tm.tm_mon:02d}-{tm.tm_mday:02d}"


OFFSET_ENV = "HEALER_CLOCK_OFFSET_FILE"


class OffsetClock(SystemClock):
    """The system clock, its wall time moved by the offset in a file (a missing or unreadable file: 0)."""

    RECHECK = 0.05

    def __init__(self, path: str) -> None:
        self.path = path
        self._offset = 0.0
        self._checked: float | None = None

    def offset(self) -> float:
        m = _time.monotonic()
        if self._checked is None or m - self._checked >= self.RECHECK:
            self._checked = m
            try:
                with open(self.path) as f:
                    self._offset = float(f.read().strip() or 0)
            except (OSError, ValueError):
                self._offset = 0.0
        return self._offset

    def now(self) -> float:
        return _time.time() + self.offset()


_default: Clock = OffsetClock(os.environ[OFFSET_ENV]) if os.environ.get(OFFSET_ENV) else SystemClock()


def system() -> Clock:
    return _default
