"""This process's watch on its clocks: the shell around healer/core/trusted_time.py.

Each daemon's pass reads its clocks through `TimeWatch.read` (wall and monotonic together, and the store's own clock
on PostgreSQL), the core folds the reading into what it knows (`observe`), and a jump or a skew seen for the first
time is reported here, once: one `clock.jump` / `clock.skew` event and one log line, not one per tick, and no page
(the clock is no fault of the fleet's, and a page could only tell that healer holds its hand).

One watch per clock object (`for_clock`): `healer up` runs the dispatcher and the supervisor in one process, on one
clock; they share what it knows, so a jump is reported once per process.
"""

from __future__ import annotations

import threading
import weakref

from loguru import logger

from healer.clock import Clock, reading
from healer.conventions import CLOCK_READING
from healer.core import trusted_time as tt

_watches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.Lock()


SAVE_EVERY = 60.0  # monotonic seconds between two saves of this host's reading (and at once on news)


class TimeWatch:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.state = tt.TimeState()
        self._lock = threading.Lock()
        # a clock whose monotonic count is the host's (SystemClock: seconds since boot) lets a short-lived process
        # (`supervise --once` from cron) compare its reading with the last one another process of this host saved
        self.shared = bool(getattr(clock, "SHARED_MONOTONIC", False))
        self._saved: float | None = None

    def read(self, store, tolerance: float | None, who: str, host: str = "") -> tuple[tt.Timebase, tt.TimeState]:
        """Read the clocks, fold the reading in, report what is new; (the reading, the state) for the snapshot.
        The store's clock is read only when a tolerance is set and this clock is the machine's, and a store that
        cannot say leaves it unknown (the pass then judges on this host's wall clock)."""
        server = None
        if self.shared and tolerance and store is not None:  # a virtual clock (tests, the simulation) has no server
            try:
                server = store.server_now()
            except Exception:  # noqa: BLE001 - the pass reads the store again and meets its outage there
                server = None
        with self._lock:
            if self.shared and tolerance and store is not None and self.state.last is None:
                self.state = _load(store, host)
            wall, mono = reading(self.clock)
            # ages are judged on the store's clock where it has one (PostgreSQL: every host judges on one clock)
            tb = tt.Timebase(now=server if server is not None else wall, wall=wall, mono=mono, store=server)
            obs = tt.observe(self.state, tb, tolerance)
            self.state = obs.state
            save = self.shared and tolerance and store is not None and (
                obs.news or self._saved is None or mono - self._saved >= SAVE_EVERY or mono < self._saved)
            if save:
                self._saved = mono
        for j in obs.news:
            self._report(store, j, tolerance, who, host)
        if save:
            _save(store, host, obs.state)
        return tb, obs.state

    def peek(self) -> tuple[tt.Timebase, tt.TimeState]:
        """A reading and what is known, without folding it in (a dry run reports nothing)."""
        wall, mono = reading(self.clock)
        return tt.Timebase(now=wall, wall=wall, mono=mono), self.state

    def _report(self, store, j: tt.Jump, tolerance: float | None, who: str, host: str) -> None:
        logger.warning("{}: {} (tolerance {:.0f}s): no stop, removal, requeue, escalation or silence page rests on an "
                       "age that crossed it until it is confirmed on the monotonic clock", who, j.describe(),
                       tolerance or 0)
        try:
            store.append("clock.skew" if j.kind == tt.SKEW else "clock.jump", host, {
                "size": round(j.size, 3), "seen": j.seen, "cutoff": j.cutoff, "by": who, "tolerance": tolerance})
        except Exception as e:  # noqa: BLE001 - the log line stands; the pass meets the store's trouble itself
            logger.error("{}: recording the clock {} failed: {}", who, j.kind, e)


def _load(store, host: str) -> tt.TimeState:
    """The reading and jumps another process of this host saved; nothing (a fresh start) when absent or unreadable."""
    try:
        d = store.get_setting(CLOCK_READING + host)
        if not isinstance(d, dict):
            return tt.TimeState()
        last = tt.Timebase(now=float(d["now"]), wall=float(d["now"]), mono=float(d["mono"]))
        jumps = tuple(tt.Jump(str(k), float(size), float(seen), float(mono), float(cutoff))
                      for k, size, seen, mono, cutoff in d.get("jumps", []))
        return tt.TimeState(last=last, jumps=jumps)
    except Exception:  # noqa: BLE001 - a damaged or missing reading costs one comparison, never the pass
        return tt.TimeState()


def _save(store, host: str, state: tt.TimeState) -> None:
    last = state.last
    if last is None:
        return
    try:
        store.set_setting(CLOCK_READING + host, {"now": last.now, "mono": last.mono, "jumps": [
            [j.kind, j.size, j.seen, j.mono, j.cutoff] for j in state.jumps]})
    except Exception as e:  # noqa: BLE001 - the next process compares with an older reading: no harm
        logger.debug("saving this host's clock reading failed: {}", e)


def for_clock(clock: Clock) -> TimeWatch:
    """The one watch of this clock object in this process."""
    with _lock:
        w = _watches.get(clock)
        if w is None:
            w = _watches[clock] = TimeWatch(clock)
        return w


class LeaseJudge:
    """`acquire_lease(..., expired=judge)`: whether another holder's lease record may be taken as expired, judged by
    healer/core/trusted_time.py's `lease_expired` on what this process watched of it (per lease name)."""

    def __init__(self, times: TimeWatch, ttl: float, tolerance: float | None) -> None:
        self.times = times
        self.ttl = ttl
        self.tolerance = tolerance
        self.seen: dict[str, tt.Watched] = {}

    def __call__(self, name: str, holder: str, token: int, expires_at: float, now: float) -> bool:
        if not self.tolerance or self.tolerance <= 0:
            return expires_at <= now  # clocks trusted (supervisor.clock_tolerance null): the store's expiry decides
        mono = self.times.clock.monotonic()
        w = self.seen[name] = tt.watch(self.seen.get(name), (holder, token, expires_at), mono, expires_at <= now)
        doubt = tt.in_doubt(self.times.state, mono, self.ttl)
        return tt.lease_expired(w, expires_at, self.ttl, now, mono, doubt)

    def wait(self, name: str, expires_at: float, now: float) -> float:
        """Seconds until the record last seen under `name` could be taken (a standby's next look)."""
        w = self.seen.get(name)
        if w is None or not self.tolerance or self.tolerance <= 0:
            return max(0.0, expires_at - now)
        return tt.wait(w, expires_at, self.ttl, now, self.times.clock.monotonic())
