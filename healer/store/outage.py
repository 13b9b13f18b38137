"""Riding out a store that went away: PostgreSQL restarted (`pg_ctl restart -m fast`), failed over or cut off
for a while, SQLite `database is locked` past its busy timeout or a disk I/O error.

A daemon (dispatcher, supervisor, courier, a host's lease renewal) does not end when a store call fails for one
of these reasons: the pass is abandoned (its transaction rolled back, nothing half-written), the next one retries.
What this module adds, once per process and store (every connection of `healer up` to one store shares it):

- one line when the outage starts and one when it ends, never one per failed pass or retry;
- capped, jittered backoff between reconnects (`next_try`): a server coming back is not hammered by every host
  at once, and a pass in the meantime fails at once instead of waiting for a connect timeout;
- a `store.unavailable` / `store.back` pair of events, written once the store takes writes again (they cannot be
  written while it is away), the first dated when the outage began;
- the daemon's end, with one line and exit 69, when the outage outlasts `store.outage_tolerance` (`StoreGone`);
- `healer_store_up` / `healer_store_outages` / `healer_store_unavailable_seconds` for Prometheus.

The rules (what counts as an outage, the backoff) are pure functions below; `Outage` keeps the state.
"""

from __future__ import annotations

import os
import random
import socket
import sqlite3
import threading
from dataclasses import dataclass, field

from loguru import logger
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from healer.errors import UNAVAILABLE, StoreLost, StoreUnavailable
from healer.store.urls import redact

DEFAULT_TOLERANCE = 180.0  # store.outage_tolerance's default (policies/default.yaml)
BACKOFF_BASE = 0.2  # seconds before the first reconnect
BACKOFF_CAP = 5.0  # never more than this between two tries


class StoreGone(StoreLost):
    """The store stayed away for longer than store.outage_tolerance: the daemon stops with one line (exit 69)
    and a service manager (or a person) restarts it once the database is back."""

    exit_code = UNAVAILABLE


# -- rules (pure) ---------------------------------------------------------------
# SQLITE_READONLY ("attempt to write a readonly database": the file's permissions changed under a running daemon, a
# read-only bind mount remounted, another user's file) is SQLite's PostgreSQL 25006: away, ridden out, then 69
_SQLITE_AWAY = ("database is locked", "database table is locked", "database is busy", "disk i/o error",
                "unable to open database file", "attempt to write a readonly database")


# PostgreSQL's own refusals that say the server cannot take this work now, not that the work is wrong (SQLSTATE
# classes and codes, https://www.postgresql.org/docs/current/errcodes-appendix.html): 08 connection, 25006 read-only
# transaction (`default_transaction_read_only`, a standby not promoted yet after a failover), 40 rollback
# (serialization, deadlock), 53 insufficient resources (disk full, out of memory, too many connections), 57 operator
# intervention (admin shutdown, crash shutdown, cannot connect now), 58 system error (I/O), XX internal error
_PG_AWAY_CODES = ("25006", "25P04")  # read-only transaction; transaction timeout
_PG_AWAY_CLASSES = ("08", "40", "53", "57", "58", "XX")


def unavailable(e: BaseException) -> bool:
    """Is `e` the store being away for a while (worth riding out), not a bug, a corrupt store or a refusal?

    A server that is up but takes no writes (read-only, a failover's standby, out of disk or connections) is away
    as much as one that does not answer: its daemons ride it out and count it against store.outage_tolerance."""
    if isinstance(e, StoreUnavailable):
        return True
    if isinstance(e, sqlite3.OperationalError):
        text = str(e).lower()
        return any(s in text for s in _SQLITE_AWAY)
    try:
        import psycopg  # lazy: pulls psycopg: 51 ms of the daemons' start (an SQLite fleet never loads it)
    except ImportError:  # pragma: no cover - psycopg is a dependency
        return False
    if isinstance(e, (psycopg.OperationalError, psycopg.InterfaceError)):
        return True
    if isinstance(e, psycopg.Error):
        return pg_away_code(getattr(e, "sqlstate", None))
    return False


def pg_away_code(sqlstate: str | None) -> bool:
    """A PostgreSQL SQLSTATE that says the server cannot take the work now (see _PG_AWAY_CLASSES)."""
    return sqlstate is not None and (sqlstate in _PG_AWAY_CODES or sqlstate[:2] in _PG_AWAY_CLASSES)


def backoff(tries: int, u: float, base: float = BACKOFF_BASE, cap: float = BACKOFF_CAP) -> float:
    """Seconds to wait after the `tries`-th failed try: doubling from `base`, capped at `cap`, jittered by
    u ∈ [0, 1) between half and the whole of it (so hosts that lost the server together do not return together)."""
    step = min(cap, base * (2 ** max(0, min(tries, 30) - 1)))
    return step * (0.5 + 0.5 * u)


# -- state ----------------------------------------------------------------------
@dataclass
class Outage:
    key: str
    since: float | None = None  # monotonic start of the current outage
    wall_since: float | None = None
    why: str = ""
    tries: int = 0
    next_try: float = 0.0
    count: int = 0  # outages seen by this process
    down_seconds: float = 0.0  # of outages that ended
    closing: bool = False  # a connection is writing the outage's pair of events (`ok`)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def down(self) -> bool:
        return self.since is not None

    def may_try(self, mono: float) -> bool:
        return self.since is None or mono >= self.next_try


_TRACKERS: dict[str, Outage] = {}
_REG = threading.Lock()
_TOLERANCE = [DEFAULT_TOLERANCE]


def set_tolerance(seconds: float) -> None:
    """The daemon's `store.outage_tolerance` (set once from the policy by `up`, `dispatch`, `supervise`)."""
    _TOLERANCE[0] = float(seconds)


def tolerance() -> float:
    return _TOLERANCE[0]


def key_of(store) -> str:
    return str(getattr(store, "url", None) or getattr(store, "path", ""))


def tracker(store) -> Outage:
    k = key_of(store)
    with _REG:
        t = _TRACKERS.get(k)
        if t is None:
            t = _TRACKERS[k] = Outage(k)
        return t


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return (s.splitlines()[0] if s else type(e).__name__)[:300]


def note(store, e: BaseException, *, tried: bool = True) -> Outage:
    """Record a failure: the outage's one line when it starts; when it was a real try at the server (`tried`, a
    connect or a statement), the next try is put off by the backoff. A pass that failed because the store is
    still backing off is not a try (it must not push the next one further away). Never raises."""
    t = tracker(store)
    clock = store.clock
    mono = clock.monotonic()
    with t.lock:
        first = t.since is None
        if first:
            t.since, t.wall_since, t.why, t.tries = mono, clock.now(), _first_line(e), 0
            t.count += 1
        if tried or first:
            t.tries += 1
            t.next_try = mono + backoff(t.tries, random.random())
    if first:
        _log("store unavailable ({}); riding it out for up to {:.0f}s (store.outage_tolerance), retrying with backoff",
             t.why, tolerance())
    return t


def failed(store, e: BaseException, *, tried: bool = True) -> None:
    """`note`, then StoreGone when the outage has outlasted store.outage_tolerance."""
    t = note(store, e, tried=tried)
    over = t.since is not None and store.clock.monotonic() - t.since > tolerance()
    if over:
        raise StoreGone(f"{getattr(store, 'path', t.key)}: the store has been unavailable for "
                        f"{store.clock.monotonic() - t.since:.0f}s, longer than store.outage_tolerance "
                        f"({tolerance():.0f}s): {t.why}; stopping (restart once it is back)")


def ok(store, *, who: str = "") -> float | None:
    """The store answered: end the outage if there was one (its line and its pair of events, written once
    by whichever of the process's connections gets there first). The seconds it lasted, or None."""
    t = tracker(store)
    if t.since is None:
        return None
    with t.lock:
        if t.since is None or t.closing:
            return None
        since, wall_since, why, tries = t.since, t.wall_since, t.why, t.tries
        t.closing = True  # one connection of the process writes the pair
    try:
        return _close(store, t, since, wall_since, why, tries, who)
    finally:
        t.closing = False


def _close(store, t: Outage, since: float, wall_since: float | None, why: str, tries: int, who: str) -> float | None:
    seconds = max(0.0, store.clock.monotonic() - since)
    # the outage ends when the store takes a write, not when a pass that only read got through: a read-only server
    # answers reads all along, and ending (then starting) the outage at each such pass would be a line per pass
    try:
        base = {"host": os.environ.get("HEALER_HOST_ID") or socket.gethostname(), "pid": os.getpid(), "who": who}
        with store.tx(fenced=False) as db:  # about the store itself: no lease has a say in it
            store._event(db, "store.unavailable", "store", {**base, "why": why}, at=wall_since)
            store._event(db, "store.back", "store", {**base, "seconds": round(seconds, 3), "tries": tries, "why": why})
    except Exception as e:  # noqa: BLE001 - still away (or away again): the same outage goes on, no new line
        if unavailable(e):
            failed(store, e)  # StoreGone past store.outage_tolerance
            return None
        # anything else (not the store being away): the outage is over all the same, its pair unwritten
    with t.lock:
        if t.since != since:
            return None  # another connection of this process ended it meanwhile
        t.since = t.wall_since = None
        t.tries = 0
    t.down_seconds += seconds
    _log("store back after {:.1f}s ({} failed tries)", seconds, tries)
    return seconds


class _Away:
    """Stands for a store that could not be opened yet: what the tracker's key and clock need."""

    def __init__(self, key: str, clock) -> None:
        self.url = key if key.startswith(("postgresql://", "postgres://")) else None
        self.path = key
        self.clock = clock


def open_waiting(open_fn, key: str, clock, *, wait=None, who: str = ""):
    """`open_fn()` for a daemon (`up`, `dispatch`, `supervise`) started while its store is away (the server down or
    restarting, SQLite locked): ridden out as an outage met later is, with one line when it starts, capped, jittered
    backoff, StoreGone (one line, exit 69) past store.outage_tolerance, and its store.unavailable / store.back pair
    written once the store opens. `key` names the store as its tracker does (the URL, or the SQLite path).
    `wait(seconds)` sleeps between tries and returns True when the daemon was told to stop meanwhile (then None
    is returned); by default the clock's sleep. Anything but the store being away is raised at once."""
    away = _Away(key, clock)
    while True:
        try:
            store = open_fn()
        except Exception as e:
            if not unavailable(e):
                raise
            failed(away, e)  # StoreGone past the tolerance
            delay = max(0.01, tracker(away).next_try - clock.monotonic())
            if (wait or clock.sleep)(delay):
                return None
            continue
        _hand_over(away, store, who)
        return store


def _hand_over(away: _Away, store, who: str) -> None:
    """The outage met while opening is the opened store's: ended now, its events written through it."""
    src, dst = tracker(away), tracker(store)
    if src is not dst and src.since is not None:
        with src.lock, dst.lock:
            if dst.since is None:
                dst.since, dst.wall_since, dst.why, dst.tries = src.since, src.wall_since, src.why, src.tries
                dst.count += 1
            src.since = src.wall_since = None
            src.tries = 0
    ok(store, who=who)


def _log(fmt: str, *args) -> None:
    try:
        logger.warning(fmt, *args)
    except Exception:  # noqa: BLE001 - a log that cannot be written drops the line
        pass


# -- metrics --------------------------------------------------------------------
class Collector:
    """Prometheus: is the store up, how many outages, how long it was away (this process's view)."""

    def __init__(self, clock=None) -> None:
        self.clock = clock

    def collect(self):
        up = GaugeMetricFamily("healer_store_up", "1 while the store answers, 0 during an outage.", labels=["store"])
        n = CounterMetricFamily("healer_store_outages", "Store outages this process rode out or is riding out.",
                                labels=["store"])
        secs = CounterMetricFamily("healer_store_unavailable_seconds", "Seconds the store was away (outages that ended).",
                                   labels=["store"])
        with _REG:
            trackers = list(_TRACKERS.values())
        for t in trackers:
            label = _label(t.key)
            up.add_metric([label], 0.0 if t.down else 1.0)
            n.add_metric([label], float(t.count))
            secs.add_metric([label], t.down_seconds)
        return [up, n, secs]


def _label(key: str) -> str:
    return redact(key) if key.startswith(("postgresql://", "postgres://")) else key


def register_metrics(registry) -> None:
    registry.register(Collector())
