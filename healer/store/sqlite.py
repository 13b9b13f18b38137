"""SQLite store (WAL). One connection per Store object; safe across processes.

The store's rules and their SQL are `SqlStore`'s (healer/store/sql.py), shared with PostgreSQL; this file is
what only SQLite has: the connection and its pragmas, transactions, the schema version, the file's own checks,
and change tracking for the simulated world (TEMP triggers on this one connection).

Writers take `BEGIN IMMEDIATE` so two processes never deadlock on an upgrade from
read to write; `busy_timeout` plus a bounded retry keeps "database is locked" from
ever reaching a caller under normal contention.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType

from healer import failpoints
from healer.clock import Clock, system
from healer.errors import INVALID_INPUT, HealerError, HostTrouble, NotFound, StoreLost, UsageError, host_trouble
from healer.files import read_only_mount
from healer.store.corrupt import StoreCorrupt, recover_hint
from healer.store.migrations import CURRENT, MIGRATIONS
from healer.store.sql import FP_TX_COMMIT, SqlStore, _Fenced, newer
from healer.store.sql_common import _placeholders

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing
if TYPE_CHECKING:
    from typing import Any


SQLITE_VERSION = sqlite3.sqlite_version  # the library's, for doctor's report
BUSY_MS = 30_000  # a write waits this long for another process's transaction (then the bounded retry)
OPEN_BUSY_MS = 5_000  # opening a store another process holds locked: found out this soon (a healthy one never is)


def _quote(v: str) -> str:
    """A string literal for trigger text (triggers cannot take bound values)."""
    return "'" + str(v).replace("'", "''") + "'"


class SqliteStore(SqlStore):
    # what the dialects spell differently, in the few words that differ (the PostgreSQL store sets its own)
    _LIKE = "LIKE"  # SQLite's LIKE ignores ASCII case; PostgreSQL's ILIKE does the same

    def __init__(self, path: str | Path, clock: Clock | None = None, *, root: str | Path | None = None,
                 migrate: bool = True, readonly: bool = False) -> None:
        super().__init__()
        self.path = str(path)
        self.root = str(root if root is not None else Path(path).resolve().parent.parent)
        self.clock = clock or system()
        self.readonly = readonly
        self._lock = threading.RLock()
        self._depth = 0  # nesting of tx() on this connection (under _lock)
        try:
            self._db = _connect_readonly(self.path) if readonly else _connect(self.path)
        except (sqlite3.DatabaseError, OSError) as e:
            raise _refused(self.path, readonly, e) or e from None
        try:
            self._setup(readonly, migrate)
        except BaseException as e:
            self._db.close()
            why = _refused(self.path, readonly, e) if isinstance(e, (sqlite3.DatabaseError, OSError)) else None
            if why is None:
                raise
            raise why from None
        self._identity = _identity(self.path)

    def _setup(self, readonly: bool, migrate: bool) -> None:
        self._db.row_factory = sqlite3.Row
        self._db.execute(f"PRAGMA busy_timeout={BUSY_MS}")
        if not readonly:
            # one short busy timeout, not fifty long ones (quick refusals still retried): a store locked when a
            # daemon starts is ridden out by its caller (outage.py open_waiting: one line, backoff, exit 69 past
            # the tolerance), and said within OPEN_BUSY_MS rather than half a minute later
            self._db.execute(f"PRAGMA busy_timeout={OPEN_BUSY_MS}")
            self._retry(lambda: self._db.execute("PRAGMA journal_mode=WAL"), within=1.0)
            self._db.execute(f"PRAGMA busy_timeout={BUSY_MS}")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=OFF")
            if migrate:
                self._migrate()
        elif self.version() > CURRENT:
            raise newer(self.path, self.version())

    def check(self) -> None:
        """Raise StoreLost when the file this connection writes is no longer the fleet's store:
        deleted (with its folder), replaced by another file, or its folder made read-only."""
        now = _identity(self.path)
        if now is None:
            raise StoreLost(f"{self.path}: the store was deleted under this process; stopping (restart once it is back)")
        if now != self._identity:
            raise StoreLost(f"{self.path}: the store was replaced by another file under this process; stopping")
        if not self.readonly and read_only_mount(self.path):
            raise StoreLost(f"{self.path}: the store is on a read-only file system now; stopping")

    # -- plumbing ---------------------------------------------------------------
    def _retry(self, fn, attempts: int = 50, within: float = BUSY_MS / 1000):
        """`fn()`, retried while the database is busy; `within`: no new try once that many seconds have passed.
        Quick refusals are retried; a lock held past one busy timeout is raised ("database is locked"), which a
        daemon rides out as an outage (healer/store/outage.py: one line, backoff, counted against
        store.outage_tolerance) instead of waiting here fifty busy timeouts long."""
        delay = 0.01
        start = self.clock.monotonic()
        for i in range(attempts):
            try:
                return fn()
            except sqlite3.OperationalError as e:
                late = self.clock.monotonic() - start >= within
                if "locked" not in str(e) and "busy" not in str(e) or i == attempts - 1 or late:
                    raise
                import random  # lazy: random: 1.9 ms of `loop run`'s start; only when the store is busy

                self.clock.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.5)
        return None

    @contextmanager
    def tx(self, *, fenced: bool = True) -> Iterator[sqlite3.Connection]:
        """One write transaction. While this store holds a lease (`hold`), the transaction first checks
        the lease's fencing token and is refused if another holder has taken it over since. Nested calls
        join the outer one, so a caller can make several store operations atomic (`with store.tx(): ...`):
        a crash halfway leaves none of them."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self._db
                finally:
                    self._depth -= 1
                return
            self._retry(lambda: self._db.execute("BEGIN IMMEDIATE"))
            self._depth = 1
            try:
                if fenced and self._fence is not None:
                    self._check_fence(self._db)
                yield self._db
                failpoints.hit(FP_TX_COMMIT)
                self._retry(lambda: self._db.execute("COMMIT"))
            except _Fenced as e:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                self._depth = 0
                raise self._refused(e) from None
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            finally:
                self._depth = 0

    def _q(self, sql: str, args: Iterable[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._retry(lambda: self._db.execute(sql, tuple(args)).fetchall())

    def version(self) -> int:
        return self._db.execute("PRAGMA user_version").fetchone()[0]

    def _migrate(self) -> None:
        if self.version() >= CURRENT:
            if self.version() > CURRENT:
                raise newer(self.path, self.version())
            return
        with self.tx() as db:
            v = db.execute("PRAGMA user_version").fetchone()[0]
            for n in range(v, CURRENT):
                for stmt in MIGRATIONS[n].split(";"):
                    if stmt.strip():
                        db.execute(stmt)
                db.execute(f"PRAGMA user_version={n + 1}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- whole tables (healer store copy) ---------------------------------------
    def tables(self) -> list[str]:
        return [r[0] for r in self._q("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]

    def dump_table(self, name: str) -> tuple[list[str], list[tuple]]:
        cur = self._db.execute(f'SELECT * FROM "{name}"')
        return [d[0] for d in cur.description], [tuple(r) for r in cur.fetchall()]

    def load_table(self, name: str, cols: list[str], rows: list[tuple]) -> None:
        """Insert rows as they are (ids kept) into an empty table, in one transaction."""
        names = ",".join(f'"{c}"' for c in cols)
        with self.tx(fenced=False) as db:
            db.executemany(f'INSERT INTO "{name}"({names}) VALUES ({_placeholders(len(cols))})', rows)

    def clear_table(self, name: str) -> None:
        """Every row of table `name` gone (a restore replacing the board, inside its one transaction)."""
        with self.tx(fenced=False) as db:
            db.execute(f'DELETE FROM "{name}"')

    def consistent_read(self) -> None:
        """Called first inside a transaction that only reads: SQLite's write transaction is one snapshot already."""

    def _for_update(self, sql: str) -> str:
        """Row lock for a read-then-write (PostgreSQL); SQLite's BEGIN IMMEDIATE already serialises writers."""
        return sql

    def _skip_locked(self, sql: str) -> str:
        """A SELECT that claims rows: SQLite's writer is already alone; PostgreSQL skips rows others hold."""
        return sql

    def journal_mode(self) -> str:
        return str(self._q("PRAGMA journal_mode")[0][0])

    # -- change tracking (the simulated world's read-through cache, chaos/engine/simstore.py) --------------------
    # TEMP tables and triggers: on this connection only, never in the file. Names come from the caller's code
    # (tables, columns, counters), never from data; values are bound or quoted by `_quote`.
    def watch_tables(self, tables: Iterable[str]) -> None:
        """Count the writes to `tables` on this connection only (TEMP triggers, never in the file): `changes()`
        tells a reader which cached views went stale. The simulated world uses it to skip re-reads."""
        with self.tx() as db:
            db.execute("CREATE TEMP TABLE IF NOT EXISTS changes(tbl TEXT PRIMARY KEY, n INTEGER NOT NULL)")
            for table in tables:
                db.execute("INSERT INTO temp.changes VALUES (?, 0) ON CONFLICT (tbl) DO NOTHING", (table,))
                for op in ("INSERT", "UPDATE", "DELETE"):
                    db.execute(f"CREATE TEMP TRIGGER IF NOT EXISTS watch_{table}_{op.lower()} AFTER {op} ON main.{table} "
                               f"BEGIN UPDATE changes SET n = n + 1 WHERE tbl = '{table}'; END")

    def watch_settings(self) -> None:
        """One counter per settings key (`changes()['settings:KEY']`): a tick rewrites a few keys, the others stay."""
        with self.tx() as db:
            db.execute("CREATE TEMP TABLE IF NOT EXISTS changes(tbl TEXT PRIMARY KEY, n INTEGER NOT NULL)")
            for op, row in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("UPDATE", "OLD"), ("DELETE", "OLD")):
                db.execute(f"CREATE TEMP TRIGGER IF NOT EXISTS watch_setting_{op.lower()}_{row.lower()} AFTER {op} "
                           f"ON main.settings BEGIN INSERT INTO changes VALUES ('settings:' || {row}.key, 1) "
                           f"ON CONFLICT(tbl) DO UPDATE SET n = n + 1; END")

    def watch_values(self, name: str, table: str, column: str, values: Iterable[str]) -> None:
        """A counter `name` bumped by every insert or delete in `table`, and by an update whose row had or gets one
        of `values` in `column` (e.g. ended agents: a running agent's heartbeat leaves it unchanged)."""
        among = ",".join(_quote(v) for v in values)
        with self.tx() as db:
            db.execute("CREATE TEMP TABLE IF NOT EXISTS changes(tbl TEXT PRIMARY KEY, n INTEGER NOT NULL)")
            db.execute("INSERT INTO temp.changes VALUES (?, 0) ON CONFLICT (tbl) DO NOTHING", (name,))
            bump = f"UPDATE changes SET n = n + 1 WHERE tbl = {_quote(name)};"
            for op, when in (("INSERT", ""),  # any insert (an upsert's update is an UPDATE)
                             ("UPDATE", f"WHEN OLD.{column} IN ({among}) OR NEW.{column} IN ({among})"), ("DELETE", "")):
                db.execute(f"CREATE TEMP TRIGGER IF NOT EXISTS watch_{name}_{op.lower()} AFTER {op} ON main.{table} "
                           f"{when} BEGIN {bump} END")

    def watch_rows(self, name: str, sources: Mapping[str, str]) -> None:
        """Note the id of every row written in each `sources` table (table -> its id column, e.g. a label's
        `ticket_id`) into the set `name`; `changed_rows(name)` hands them out."""
        with self.tx() as db:
            db.execute(f"CREATE TEMP TABLE IF NOT EXISTS {name}(id TEXT PRIMARY KEY)")
            for table, col in sources.items():
                for op, olds in (("INSERT", ("NEW",)), ("UPDATE", ("NEW", "OLD")), ("DELETE", ("OLD",))):
                    note = " ".join(f"INSERT INTO {name} VALUES ({o}.{col}) ON CONFLICT (id) DO NOTHING;" for o in olds)
                    db.execute(f"CREATE TEMP TRIGGER IF NOT EXISTS {name}_{table}_{op.lower()} AFTER {op} "
                               f"ON main.{table} BEGIN {note} END")

    def changed_rows(self, name: str) -> list[str]:
        """The ids `watch_rows(name, ...)` noted since the last call, and the set emptied (a write after this call
        is noted again). Outside write transactions only (a rollback would bring back rows noted as written)."""
        with self._lock:
            ids = [r[0] for r in self._db.execute(f"SELECT id FROM temp.{name}")]
            if ids:
                self._db.execute(f"DELETE FROM temp.{name}")
            return ids

    def write_count(self) -> int:
        """Rows this connection has written, ever (SQLite's total_changes): the same number means no write since."""
        return self._db.total_changes

    def in_write(self) -> bool:
        """A write transaction is open on this connection (its writes may yet roll back)."""
        return self._db.in_transaction

    def integrity(self, *, quick: bool = False) -> str:
        """"ok" when SQLite's integrity check finds the file intact, else its first complaint. `quick`: every page
        read, no index cross-checks (doctor)."""
        return str(self._q("PRAGMA quick_check" if quick else "PRAGMA integrity_check")[0][0])

    def changes(self) -> Mapping[str, int]:
        """The write counters (read-only). Asked several times per store call by the simulated world's cache: a
        view, not a copy."""
        # no row changed on this connection since the last call (SQLite's own count): the counters are the same
        total = self._db.total_changes
        last = getattr(self, "_changes_seen", None)
        if last is not None and last[0] == total:
            return last[1]
        got = MappingProxyType({r[0]: r[1] for r in self._q("SELECT tbl, n FROM temp.changes")})
        # inside a write transaction the counts may yet roll back, and a rollback does not lower total_changes:
        # remembered now, they would be served again after it as if they had been committed
        self._changes_seen = None if self._db.in_transaction else (total, got)
        return got

    def no_fsync(self) -> None:
        """A throwaway store (a simulated game day): no fsync at WAL checkpoints."""
        with self._lock:
            self._db.execute("PRAGMA synchronous=OFF")


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


def _connect(path: str) -> sqlite3.Connection:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)


def _refused(path: str, readonly: bool, e: BaseException) -> HealerError | None:
    """One line for a store file that cannot be opened for what it is (None: a failure of healer, left as it is):
    a folder on a read-only file system or a full disk (74), a path that cannot be a store file (64), a file
    that is no SQLite database (65)."""
    folder = os.path.dirname(os.path.abspath(path))
    if host_trouble(e) or (not readonly and os.path.isdir(folder) and read_only_mount(folder)):
        return HostTrouble(f"{path}: the store's folder takes no writes ({getattr(e, 'strerror', None) or e}; "
                           "a read-only file system or a full disk); what was saved stays saved")
    if os.path.isdir(path):
        return UsageError(f"{path}: expected a store file, found a folder")
    if isinstance(e, FileExistsError):
        return UsageError(f"{path}: cannot make the store's folder: {e.filename or folder} is a file")
    if isinstance(e, OSError):
        return UsageError(f"{path}: cannot make the store's folder: {e.strerror or e}")
    if "malformed" in str(e):  # damaged pages: one line, 74, and how to recover (healer/store/corrupt.py)
        return StoreCorrupt(f"{path}: the store is damaged ({e}); {recover_hint(path)}")
    if not isinstance(e, sqlite3.OperationalError) or "not a database" in str(e):
        return HealerError(f"{path}: not a healer store (SQLite: {e})", INVALID_INPUT)
    return None


def _connect_readonly(path: str) -> sqlite3.Connection:
    """A connection that never writes: for status, plan and journal on a read-only .healer/.

    Without a -wal file no writer is connected (SQLite removes it with the last connection) and
    the file is read as immutable: nothing is created beside it, so a read changes no byte and
    works on a read-only folder. With one, a plain read-only connection sees the writer's latest."""
    if not os.path.exists(path):
        raise NotFound(f"{path}: no store here")
    uri = Path(path).resolve().as_uri()
    order = ("?mode=ro", "?mode=ro&immutable=1") if os.path.exists(path + "-wal") else ("?mode=ro&immutable=1",)
    for q in order:
        db = sqlite3.connect(uri + q, uri=True, timeout=30, isolation_level=None, check_same_thread=False)
        try:
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError:
            db.close()
    raise HealerError(f"{path}: cannot open the store, even read-only")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
