"""PostgreSQL store (psycopg 3): one board, one event log and one lease table for fleets on several hosts.

Theory of operation. Every rule of the store is written once, in `SqlStore` (healer/store/sql.py), which
the SQLite store shares; this adapter differs only where the two databases differ, all of it in this file:

- SQL dialect. Statements are written once, in the subset both speak (`INSERT … ON CONFLICT … DO`,
  `RETURNING id`, `excluded.`); nothing rewrites them. What the dialects spell differently is a word
  each store names: `_LIKE` (ILIKE here: SQLite's LIKE ignores ASCII case), `_for_update` and
  `_skip_locked` (row locks, nothing on SQLite), the column types of the migrations
  (healer/store/migrations.py) and the paramstyle (`?` here is `%s`: `_format`, cached per statement).
- Isolation. SQLite has one writer at a time (BEGIN IMMEDIATE). Here writers run concurrently under
  READ COMMITTED, and every read-modify-write the store does (compare-and-set moves, intents, leases,
  cooldowns) reads its row with `_for_update`, so it is still one atomic step. Claims use `FOR UPDATE SKIP LOCKED`: three dispatchers never wait on each other's ticket.
- Event order. Identity ids are handed out at INSERT, not at COMMIT, so a follower reading `id > n`
  could miss a slower transaction's lower id. A transaction takes a per-fleet advisory lock before its
  first event and keeps it to COMMIT, so ids appear in commit order. Such a transaction takes no row
  lock after its first event (store methods write events last), hence no lock-order deadlock.
- Wake-ups. Each event NOTIFYs the fleet's channel at commit; `wait_for_events` LISTENs, so a
  dispatcher or supervisor on another host wakes when the board changes instead of polling.
- Failure. Lost connections are re-opened on the next call; TCP keepalives and the server-side
  `idle_in_transaction_session_timeout` end a partitioned host's transaction (and free its locks).

A fleet is one schema: the URL's `options=-csearch_path=NAME` (or the database's default schema);
the advisory keys and the NOTIFY channel are derived from it, so fleets can share a database.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

import psycopg

from healer import failpoints, lifecycle
from healer.clock import Clock, system
from healer.errors import HealerError, StoreUnavailable
from healer.store import outage
from healer.store.migrations import CURRENT, PG_MIGRATIONS
from healer.store.sql import FP_TX_COMMIT, SqlStore, _Fenced, newer
from healer.store.sql_common import _Where
from healer.store.urls import redact  # in its own module so that `outage` needs no postgres (no cycle)

# advisory lock classes (the second key is the fleet's schema hash)
_LOCK_EVENTS, _LOCK_TICKET_IDS, _LOCK_MIGRATE = 1, 2, 3
IDLE_IN_TX_TIMEOUT = "10s"  # a host partitioned mid-transaction releases its locks after this
PATIENCE = 10.0  # seconds a call waits for a server that is away (reconnecting with backoff) before it fails


def is_url(s: str) -> bool:
    return s.startswith(("postgresql://", "postgres://"))


class _Meta:
    """The schema as the server describes it (store copy and restore): columns, primary keys, identity columns."""

    def __init__(self, rows: list[tuple[str, str, bool, bool]]) -> None:
        self.columns: dict[str, list[str]] = {}
        self.pk: dict[str, list[str]] = {}
        self.identity: set[str] = set()
        for table, col, is_pk, is_identity in rows:
            self.columns.setdefault(table, []).append(col)
            if is_pk:
                self.pk.setdefault(table, []).append(col)
            if is_identity:
                self.identity.add(table)


def _quoted(col: str) -> str:
    return f'"{col}"'


@lru_cache(maxsize=1024)
def _format(sql: str) -> str:
    """The statement in psycopg's paramstyle: `?` → `%s` (a literal `%` doubled). The store's SQL never has a `?` or
    a `%` anywhere but as a placeholder or inside a LIKE pattern; nothing else of the text is touched (see the
    module's docstring: upserts, locks, RETURNING are written out, not inferred)."""
    return sql.replace("%", "%%").replace("?", "%s")


def _row_factory(cursor):
    desc = cursor.description
    if desc is None:
        return tuple
    return _row_class(tuple(d.name for d in desc))


@lru_cache(maxsize=256)
def _row_class(names: tuple[str, ...]):
    idx = {n: i for i, n in enumerate(names)}

    class Row(tuple):
        """Indexable by position or by column name, like sqlite3.Row."""

        __slots__ = ()

        def __getitem__(self, k):
            return tuple.__getitem__(self, idx[k] if isinstance(k, str) else k)

        def keys(self) -> list[str]:
            return list(names)

    return Row


class _Conn:
    """What the shared methods call `db` inside a transaction: `execute(sql, args)`, the statement as they wrote it."""

    def __init__(self, store: PgStore) -> None:
        self._s = store

    def execute(self, sql: str, args: Iterable[Any] = ()):
        return self._s._pg.execute(_format(sql), tuple(args))

    def executemany(self, sql: str, rows: Iterable[tuple]) -> None:
        with self._s._pg.cursor() as cur:
            cur.executemany(_format(sql), [tuple(r) for r in rows])


class PgStore(SqlStore):
    _LIKE = "ILIKE"

    def __init__(self, url: str, clock: Clock | None = None, *, root: str | None = None, migrate: bool = True) -> None:
        super().__init__()
        self.url = url
        self.path = redact(url)
        self.root = str(root if root is not None else ".")
        self.clock = clock or system()
        self._lock = threading.RLock()
        self._in_write = False
        self._events_locked = False
        self._pg: psycopg.Connection[Any]  # the connection: _connect's, below
        self._listener: psycopg.Connection[Any] | None = None
        self.patience = PATIENCE
        self._meta = _Meta([])
        self._db = _Conn(self)
        self._connect()
        if migrate:
            self._migrate()
        else:
            self._load_meta()

    def server_now(self) -> float | None:
        """The server's wall clock (clock_timestamp(): now, not the transaction's start): the hosts' clocks are
        checked against it (healer/core/trusted_time.py)."""
        return float(self._q("SELECT extract(epoch FROM clock_timestamp()) AS t")[0]["t"])

    def check(self) -> None:
        """A server store cannot be deleted under this process; a lost connection raises StoreUnavailable."""
        return None

    # -- plumbing ---------------------------------------------------------------
    def _open(self):
        try:
            conn = psycopg.connect(self.url, autocommit=True, row_factory=_row_factory, connect_timeout=5,
                                   keepalives=1, keepalives_idle=5, keepalives_interval=2, keepalives_count=3)
        except psycopg.Error as e:
            raise StoreUnavailable(f"{self.path}: cannot connect: {_first_line(e, self.url)}") from None
        conn.execute(f"SET idle_in_transaction_session_timeout = '{IDLE_IN_TX_TIMEOUT}'")
        return conn

    def _connect(self) -> None:
        self._pg = self._open()
        r = self._pg.execute("SELECT current_schema() AS s, hashtext(current_schema()) AS h").fetchall()[0]  # always one
        if r["s"] is None:
            raise HealerError(f"{self.path}: no schema to use (search_path names none that exists)", 65)
        self.schema, self._key = r["s"], int(r["h"])
        self.channel = "healer_" + "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in self.schema.lower())[:50]

    def _alive(self) -> None:
        """A live connection, re-opened when it was lost. While the server is away, tries are spaced by the
        process's capped, jittered backoff (healer/store/outage.py): in between, a call fails at once."""
        if not (self._pg.closed or self._pg.broken):
            return
        # a call waits up to `patience` for the server (a restart takes a second or two): short outages cost the
        # caller (a loop runner's event, a pass) nothing; longer ones fail the call, and its daemon rides them out
        deadline = self.clock.monotonic() + self.patience
        while True:
            t = outage.tracker(self)
            if t.may_try(self.clock.monotonic()):
                self._pg.close()
                try:
                    self._connect()
                    return
                except StoreUnavailable as e:
                    outage.failed(self, e)  # StoreGone past store.outage_tolerance
                    err = e
            else:
                err = StoreUnavailable(f"{self.path}: {t.why} (retrying with backoff)")
            now = self.clock.monotonic()
            if now >= deadline:
                raise err
            self.clock.sleep(max(0.01, min(t.next_try, deadline) - now))

    def _lost(self, e: Exception) -> StoreUnavailable:
        """The connection failed under a call: the outage is noted (one line per outage), the call fails."""
        err = StoreUnavailable(f"{self.path}: {_first_line(e, self.url)}")
        outage.failed(self, err)
        return err

    def _load_meta(self) -> None:
        rows = self._pg.execute(
            """SELECT c.table_name, c.column_name,
                      EXISTS (SELECT 1 FROM information_schema.key_column_usage k
                              JOIN information_schema.table_constraints t ON t.constraint_name = k.constraint_name
                                   AND t.table_schema = k.table_schema
                              WHERE t.constraint_type = 'PRIMARY KEY' AND k.table_schema = c.table_schema
                                    AND k.table_name = c.table_name AND k.column_name = c.column_name) AS is_pk,
                      c.is_identity = 'YES' AS is_identity
               FROM information_schema.columns c WHERE c.table_schema = current_schema()
               ORDER BY c.table_name, c.ordinal_position""").fetchall()
        self._meta = _Meta([tuple(r) for r in rows])

    @contextmanager
    def tx(self, *, fenced: bool = True) -> Iterator[_Conn]:
        with self._lock:
            if self._in_write:  # nested: a savepoint inside the open transaction
                with self._pg.transaction():
                    yield self._db
                return
            self._in_write, self._events_locked = True, False
            try:
                with self._begin():
                    if fenced and self._fence is not None:
                        self._check_fence(self._db)
                    yield self._db
                    failpoints.hit(FP_TX_COMMIT)
            except _Fenced as e:
                self._in_write = False
                raise self._refused(e) from None
            except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                raise self._lost(e) from None
            finally:
                self._in_write = self._events_locked = False

    @contextmanager
    def _begin(self):
        """The transaction, begun on a live connection. A connection the server ended while it sat idle (a restart,
        a failover) is only found out by its next statement: when that is the BEGIN, nothing of the caller's has run
        yet, so one reconnect and a second BEGIN are safe. A loss after the BEGIN fails the call (StoreUnavailable)."""
        for attempt in (1, 2):
            self._alive()
            cm = self._pg.transaction()
            try:
                cm.__enter__()
                break
            except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                if attempt == 2 or not (self._pg.closed or self._pg.broken):
                    raise self._lost(e) from None
                outage.note(self, StoreUnavailable(f"{self.path}: {_first_line(e, self.url)}"))
                outage.tracker(self).next_try = 0.0  # the one immediate reconnect
        try:
            yield
        except BaseException as e:
            if not cm.__exit__(type(e), e, e.__traceback__):
                raise
        else:
            cm.__exit__(None, None, None)

    def _q(self, sql: str, args: Iterable[Any] = ()) -> list:
        with self._lock:
            if self._in_write:
                return self._db.execute(sql, args).fetchall()
            for attempt in (1, 2):
                try:
                    self._alive()
                    return self._db.execute(sql, args).fetchall()
                except (psycopg.OperationalError, psycopg.InterfaceError) as e:
                    if attempt == 2 or not (self._pg.closed or self._pg.broken):
                        raise self._lost(e) from None
                    # the connection was ended under us (a restart, a failover): noted as an outage even when
                    # the reconnect below works at once, so the restart shows in the log and the journal
                    outage.note(self, StoreUnavailable(f"{self.path}: {_first_line(e, self.url)}"))
                    outage.tracker(self).next_try = 0.0  # the one immediate reconnect
        return []

    def version(self) -> int:
        r = self._pg.execute("SELECT to_regclass('healer_schema') IS NOT NULL AS t").fetchall()[0]  # always one
        if not r["t"]:
            return 0
        r = self._pg.execute("SELECT version FROM healer_schema").fetchone()
        return int(r["version"]) if r else 0

    def _migrate(self) -> None:
        v = self.version()
        if v > CURRENT:
            raise newer(self.path, v)
        if v < CURRENT:
            with self._lock, self._pg.transaction():
                # one migrator at a time, even when several hosts start together
                self._pg.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_MIGRATE, self._key))
                self._pg.execute("CREATE TABLE IF NOT EXISTS healer_schema (version INTEGER NOT NULL)")
                r = self._pg.execute("SELECT version FROM healer_schema").fetchone()
                if r is None:
                    self._pg.execute("INSERT INTO healer_schema VALUES (0)")
                v = int(r["version"]) if r else 0
                for n in range(v, CURRENT):
                    for stmt in PG_MIGRATIONS[n].split(";"):
                        if stmt.strip():
                            self._pg.execute(stmt)
                    self._pg.execute("UPDATE healer_schema SET version = %s", (n + 1,))
        self._load_meta()

    def tables(self) -> list[str]:
        return sorted(t for t in self._meta.columns if t != "healer_schema")

    def dump_table(self, name: str) -> tuple[list[str], list[tuple]]:
        cols = self._meta.columns[name]
        rows = self._pg.execute(f'SELECT {",".join(_quoted(c) for c in cols)} FROM "{name}"').fetchall()
        return list(cols), [tuple(r) for r in rows]

    def load_table(self, name: str, cols: list[str], rows: list[tuple]) -> None:
        names = ",".join(_quoted(c) for c in cols)
        with self.tx(fenced=False):
            with self._pg.cursor() as cur:
                cur.executemany(f'INSERT INTO "{name}"({names}) VALUES ({",".join(["%s"] * len(cols))})', rows)
            if name in self._meta.identity:  # ids were copied: the sequence continues after them
                self._pg.execute(f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                                 f'GREATEST((SELECT MAX(id) FROM "{name}"), 1))')

    def clear_table(self, name: str) -> None:
        with self.tx(fenced=False):
            self._pg.execute(f'DELETE FROM "{name}"')

    def consistent_read(self) -> None:
        """First inside a transaction that only reads: every statement of it sees one snapshot of the board."""
        self._pg.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")

    def close(self) -> None:
        with self._lock:
            for c in (self._pg, self._listener):
                if c is not None:
                    c.close()

    def _event(self, db, kind: str, subject: str, payload: dict | None, at: float | None = None) -> int:
        if self._in_write and not self._events_locked:
            # the lock is held to COMMIT: event ids become visible in id order (see the module's docstring);
            # the NOTIFY is delivered at COMMIT, once per transaction, to every LISTENing host
            self._pg.execute("SELECT pg_advisory_xact_lock(%s, %s), pg_notify(%s, '')", (_LOCK_EVENTS, self._key, self.channel))
            self._events_locked = True
        return super()._event(db, kind, subject, payload, at)

    def _next_id(self, db) -> str:
        self._pg.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_TICKET_IDS, self._key))
        return super()._next_id(db)

    def _skip_locked(self, sql: str) -> str:
        return sql + " FOR UPDATE SKIP LOCKED"

    def _for_update(self, sql: str) -> str:
        return sql + " FOR UPDATE"

    def claim_ticket(self, *, actor: str, among: Iterable[str] | None = None, reason: str = "claimed"):
        """One statement picks and moves the ticket (FOR UPDATE SKIP LOCKED inside an UPDATE … RETURNING):
        half the round trips of the shared version, which matters with dispatchers on other hosts."""
        w = _Where().add("state = ?", lifecycle.QUEUED).among("id", among)
        pick = self._skip_locked("SELECT id FROM tickets" + w.sql() + " ORDER BY priority, created_at, id LIMIT 1")
        with self.tx() as db:
            r = db.execute(f"UPDATE tickets SET state=?, updated_at=? WHERE id = ({pick}) RETURNING *",
                           (lifecycle.IN_PROGRESS, self.now(), *w.args)).fetchone()
            if r is None:
                return None
            ev = lifecycle.check(r["id"], lifecycle.QUEUED, lifecycle.IN_PROGRESS)
            self._event(db, "ticket.moved", r["id"], {"from": lifecycle.QUEUED, "to": lifecycle.IN_PROGRESS, "event": ev,
                                                      "actor": actor, "reason": reason})
        labels = {x["label"]: x["added_at"] for x in self._q("SELECT * FROM labels WHERE ticket_id=? ORDER BY added_at", (r["id"],))}
        return self._ticket_from(r, labels)

    # -- wake-ups ---------------------------------------------------------------
    def wait_for_events(self, after: int, timeout: float, poll: float = 0.1) -> int:
        """LISTEN on the fleet's channel: return as soon as an event newer than `after` is committed."""
        try:
            if self._listener is None or self._listener.closed or self._listener.broken:
                if not outage.tracker(self).may_try(self.clock.monotonic()):
                    raise StoreUnavailable(self.path)  # backing off: the main connection retries first
                self._listener = self._open()
                self._listener.execute(f"LISTEN {self.channel}")
            last = self.last_event_id()  # after LISTEN: nothing committed in between is missed
            if last > after:
                return last
            for _ in self._listener.notifies(timeout=max(0.0, timeout), stop_after=1):
                pass
            return self.last_event_id()
        except (psycopg.OperationalError, psycopg.InterfaceError, StoreUnavailable):
            # the server is away: wait out the timeout (a caller's loop goes on) and say nothing new came
            if self._listener is not None:
                self._listener.close()
            self._listener = None
            self.clock.sleep(max(0.0, min(timeout, 1.0)))
            return after

    def _idle(self, after: int, poll: float) -> None:
        self.wait_for_events(after, poll * 10)  # woken by NOTIFY; the timeout is only a safety net

    # -- introspection (doctor, store migrate) -----------------------------------
    def integrity(self, *, quick: bool = False) -> str:
        """"ok" when the server answers: its pages are its own to check (data checksums, amcheck), not a client's."""
        self._q("SELECT 1")
        return "ok"

    def journal_mode(self) -> str:
        return "postgresql"  # WAL is the server's business

    def no_fsync(self) -> None:
        """SQLite's throwaway-store switch; durability here is the server's configuration."""

    def server_info(self) -> dict[str, Any]:
        r = self._pg.execute("SELECT current_setting('server_version') AS v, current_database() AS d, "
                             "current_user AS u").fetchall()[0]  # always one
        return {"server_version": r["v"], "database": r["d"], "user": r["u"], "schema": self.schema,
                "schema_version": self.version(), "healer_schema_version": CURRENT}


def _first_line(e: Exception, url: str) -> str:
    msg = (str(e).strip().splitlines() or [type(e).__name__])[0]
    u = urlsplit(url)
    if u.password:  # libpq can echo the connection string: never print the secret
        msg = msg.replace(u.password, "***")
    return msg
