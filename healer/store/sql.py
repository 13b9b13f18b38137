"""The store's rules, written once in the SQL both databases speak: `SqlStore`, the base of the SQLite store
(healer/store/sqlite.py) and the PostgreSQL store (healer/store/postgres.py).

Every statement here is plain SQL that SQLite (>= 3.35) and PostgreSQL both run as written: upserts are
`INSERT … ON CONFLICT (…) DO NOTHING | DO UPDATE SET c=excluded.c`, new ids come back with `RETURNING id`, an
empty `IN ()` is spelled `1 = 0`. Nothing rewrites them at run time. What the two spell differently is named
by each adapter, in a few words:

- `_LIKE`: SQLite's LIKE ignores ASCII case, PostgreSQL's ILIKE does;
- `_for_update(sql)` / `_skip_locked(sql)`: the row lock of a read-modify-write (PostgreSQL's writers run
  concurrently) and a claim that skips rows another holds; nothing on SQLite, whose writer is alone;
- `tx()`, `_q()`: the transaction and a read, on the adapter's connection, in its paramstyle;
- `_event`, `_next_id`: PostgreSQL adds its advisory locks (event ids in commit order, ticket numbers);
- column types, in the migrations (healer/store/migrations.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from healer import failpoints, lifecycle
from healer.errors import INVALID_INPUT, HealerError, NotFound, StaleLease
from healer.store.migrations import CURRENT
from healer.store.sql_adopted import AdoptedSql
from healer.store.sql_agents import AgentMemo, AgentsSql
from healer.store.sql_attempts import AttemptsSql
from healer.store.sql_common import _j, _placeholders, _rec, _Where
from healer.store.sql_outbox import OutboxSql
from healer.store.sql_tickets import TicketsSql

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing
if TYPE_CHECKING:
    from typing import Any

    from healer.clock import Clock
    from healer.records import Event, Intent, Lease

FP_TX_COMMIT = failpoints.declare("store.before_commit", "healer/store/sql.py: just before a write transaction commits")


class SqlStore(TicketsSql, AgentsSql, AttemptsSql, OutboxSql, AdoptedSql):
    """The rules of the store (the port, healer/store/base.py) over a connection an adapter provides.

    The tables' SQL is in parts beside this file, by what they hold: sql_tickets.py (tickets, labels, comments),
    sql_agents.py (agents, worktrees), sql_attempts.py (attempts, proposals), sql_outbox.py (notifications), sql_adopted.py (adopted loops);
    here are the adapter's hooks, fencing, events, intents, leases, cooldowns and settings."""

    path: str
    root: str
    clock: Clock

    def __init__(self) -> None:
        """What both adapters hold besides their connection; each calls this first."""
        self._fence: Lease | None = None
        self._agent_memo = AgentMemo()

    # -- what each adapter provides (besides SqlPart's tx, _q, _for_update, _skip_locked) ---------------------
    def version(self) -> int:
        raise NotImplementedError

    def _migrate(self) -> None:
        raise NotImplementedError

    # -- fencing ---------------------------------------------------------------
    def hold(self, lease: Lease | None) -> None:
        """Fence this store's writes with `lease` (None: stop). Every later write transaction checks that
        the lease still has this holder and token, in the same transaction as the write."""
        self._fence = lease

    def _check_fence(self, db) -> None:
        f = self._fence
        assert f is not None
        r = db.execute(self._for_update("SELECT holder, token FROM leases WHERE name=?"), (f.name,)).fetchone()
        if r is not None and r["holder"] == f.holder and int(r["token"]) == f.token:
            return
        now = holder = None
        if r is not None:
            holder, now = r["holder"], int(r["token"])
        raise _Fenced(f, holder, now)

    def _refused(self, e: _Fenced) -> StaleLease:
        f = e.lease
        self._fence = None  # a stale holder: its later writes are not holder writes
        with self.tx(fenced=False) as db:
            self._event(db, "lease.stale_write_refused", f.name, {"holder": f.holder, "token": f.token,
                                                                   "current_holder": e.holder, "current_token": e.token})
        return StaleLease(f"lease {f.name!r}: {f.holder} (token {f.token}) is no longer the holder "
                          f"(now {e.holder or 'nobody'}, token {e.token}); write refused")

    def migrate(self) -> tuple[int, int]:
        """Bring the schema to this healer's version (forward only); (before, after)."""
        before = self.version()
        self._migrate()
        return before, self.version()

    def now(self) -> float:
        return self.clock.now()

    def server_now(self) -> float | None:
        """The store's own clock, when it has one apart from this host's (PostgreSQL); None: the store is local."""
        return None

    def _event(self, db: Any, kind: str, subject: str, payload: dict | None, at: float | None = None) -> int:
        return int(db.execute(
            "INSERT INTO events(at, kind, subject, payload) VALUES (?,?,?,?) RETURNING id",
            (self.now() if at is None else at, kind, subject, _j(payload or {})),
        ).fetchone()[0])

    # -- events -----------------------------------------------------------------
    def append(self, kind: str, subject: str = "", payload: dict[str, Any] | None = None, at: float | None = None) -> int:
        with self.tx() as db:
            return self._event(db, kind, subject, payload, at)

    def events(self, *, after: int = 0, kinds: Iterable[str] | None = None, subject: str | None = None,
               since: float | None = None, limit: int | None = None, prefix: str | None = None,
               contains: str | None = None, until_id: int | None = None) -> list[Event]:
        """`contains` filters on the payload's compact JSON text, e.g. '"to":"queued"' (keys are sorted, no spaces);
        `until_id` keeps to the events up to that id (a cursor read before the query: what comes later is read next time)."""
        w = _Where().add("id > ?", after).add("id <= ?", until_id).among("kind", kinds).add("subject = ?", subject)
        w.add("at >= ?", since)
        w.add(f"kind {self._LIKE} ?", None if prefix is None else prefix + "%")
        if contains is not None:
            esc = contains.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            w.add(f"payload {self._LIKE} ? ESCAPE '\\'", f"%{esc}%")
        sql, args = "SELECT * FROM events" + w.sql() + " ORDER BY id", w.args
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return [_rec.Event(r["id"], r["at"], r["kind"], r["subject"], json.loads(r["payload"])) for r in self._q(sql, args)]

    def event_heads(self, *, after: int = 0, limit: int | None = None) -> list[tuple[int, str, str]]:
        """(id, kind, subject) of each event after `after`, payloads left unread: what a reader that only asks
        "what changed, about whom" needs (a tick's own summary event carries a large payload)."""
        sql, args = "SELECT id, kind, subject FROM events WHERE id > ? ORDER BY id", [after]
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return [(int(r[0]), r[1], r[2]) for r in self._q(sql, args)]

    def tail(self, n: int = 50) -> list[Event]:
        rows = self._q("SELECT * FROM events ORDER BY id DESC LIMIT ?", (n,))
        return [_rec.Event(r["id"], r["at"], r["kind"], r["subject"], json.loads(r["payload"])) for r in reversed(rows)]

    def follow(self, after: int = 0, poll: float = 0.5) -> Iterator[Event]:
        while True:
            batch = self.events(after=after, limit=500)
            for e in batch:
                after = e.id
                yield e
            if not batch:
                self._idle(after, poll)

    def _idle(self, after: int, poll: float) -> None:
        """What `follow` does when nothing is new: sleep here; PostgreSQL waits for a NOTIFY instead."""
        self.clock.sleep(poll)

    def wait_for_events(self, after: int, timeout: float, poll: float = 0.1) -> int:
        """Block until an event newer than `after` exists or `timeout` passes; return the last event id.
        SQLite polls; PostgreSQL is woken by NOTIFY (dispatchers and supervisors on other hosts)."""
        end = self.clock.monotonic() + timeout
        while True:
            last = self.last_event_id()
            if last > after or self.clock.monotonic() >= end:
                return last
            self.clock.sleep(min(poll, max(0.0, end - self.clock.monotonic())))

    def last_event_id(self) -> int:
        r = self._q("SELECT COALESCE(MAX(id), 0) AS m FROM events")
        return int(r[0]["m"])

    def count_events(self, kind: str, since: float | None = None, subject: str | None = None) -> int:
        w = _Where().add("kind = ?", kind).add("at >= ?", since).add("subject = ?", subject)
        sql, args = "SELECT COUNT(*) AS n FROM events" + w.sql(), w.args
        return int(self._q(sql, args)[0]["n"])

    # -- intents ----------------------------------------------------------------
    def _intent(self, r: Any) -> Intent:
        return _rec.Intent(r["id"], r["action"], r["subject"], r["state"], json.loads(r["params"]), r["actor"], r["reason"],
                      r["created_at"], r["updated_at"], json.loads(r["result"]))

    def plan_intent(self, action: str, subject: str, params: dict[str, Any], *, actor: str, reason: str = "") -> Intent:
        now = self.now()
        with self.tx() as db:
            iid = int(db.execute("INSERT INTO intents(action, subject, state, params, actor, reason, created_at, updated_at) "
                                 "VALUES (?,?,?,?,?,?,?,?) RETURNING id",
                                 (action, subject, "planned", _j(params), actor, reason, now, now)).fetchone()[0])
            self._event(db, "intent.planned", subject, {"intent": iid, "action": action, "params": params, "actor": actor, "reason": reason})
        return self._intent(self._q("SELECT * FROM intents WHERE id=?", (iid,))[0])

    def set_intent(self, id: int, state: str, result: dict[str, Any] | None = None) -> None:
        with self.tx() as db:
            r = db.execute(self._for_update("SELECT * FROM intents WHERE id=?"), (id,)).fetchone()
            if r is None:
                raise NotFound(f"no intent {id}")
            lifecycle.INTENT.check(id, r["state"], state)
            db.execute("UPDATE intents SET state=?, updated_at=?, result=? WHERE id=?", (state, self.now(), _j(result or {}), id))
            self._event(db, f"intent.{state}", r["subject"], {"intent": id, "action": r["action"], "result": result or {}})

    def intents(self, states: Iterable[str] | None = None, limit: int | None = None, subject: str | None = None,
                since: float | None = None, actions: Iterable[str] | None = None,
                exclude_actor: str | None = None) -> list[Intent]:
        """`actions` and `exclude_actor` filter in the database: a caller that wants the few intents of other
        actors does not decode every intent of the window (its params and result are JSON)."""
        w = _Where().among("state", states).add("subject=?", subject).add("created_at >= ?", since)
        w.among("action", None if actions is None else sorted(actions)).add("actor != ?", exclude_actor)
        sql, args = "SELECT * FROM intents" + w.sql(), w.args
        sql += " ORDER BY id"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return [self._intent(r) for r in self._q(sql, args)]

    def count_intents(self, *, action: str | None = None, since: float | None = None,
                      states: Iterable[str] | None = None) -> int:
        """How many intents (of one action, since a time, in some states): per-action rate limits."""
        w = _Where().add("action=?", action).add("created_at >= ?", since).among("state", states)
        sql, args = "SELECT COUNT(*) AS n FROM intents" + w.sql(), w.args
        return int(self._q(sql, args)[0]["n"])

    # -- leases -----------------------------------------------------------------
    def acquire_lease(self, name: str, holder: str, pid: int, host: str, ttl: float, *, pid_alive=None,
                      expired=None) -> Lease | None:
        """Take or renew `name`. Taken over when expired, or when its holder's pid is gone on this host.
        A new holder gets the next fencing token; a renewal keeps it (and fails if the token moved on).
        `expired(name, holder, token, expires_at, now)`: whether another holder's record may be taken as expired
        (healer/fleet/timewatch.LeaseJudge: not on a clock that stepped); None: `expires_at <= now`."""
        now = self.now()
        with self.tx(fenced=False) as db:
            # the name's token row exists first and is locked (PostgreSQL: FOR UPDATE): acquirers queue on it
            db.execute("INSERT INTO lease_tokens VALUES (?,?) ON CONFLICT (name) DO NOTHING", (name, 0))
            last = int(db.execute(self._for_update("SELECT token FROM lease_tokens WHERE name=?"), (name,)).fetchone()["token"])
            r = db.execute(self._for_update("SELECT * FROM leases WHERE name=?"), (name,)).fetchone()
            ev: tuple[str, dict] | None = None
            if r is not None and r["holder"] != holder:
                gone = (r["expires_at"] <= now if expired is None
                        else expired(name, r["holder"], int(r["token"]), float(r["expires_at"]), now))
                dead = r["host"] == host and pid_alive is not None and not pid_alive(r["pid"])
                if not (gone or dead):
                    return None
                token = last + 1
                ev = ("lease.taken_over", {"from": r["holder"], "to": holder, "expired": gone, "holder_dead": dead,
                                           "token": token, "from_token": int(r["token"])})
            elif r is None:
                token = last + 1
                ev = ("lease.acquired", {"holder": holder, "pid": pid, "host": host, "token": token})
            else:
                token = int(r["token"])
            acquired = r["acquired_at"] if (r is not None and r["holder"] == holder) else now
            db.execute("INSERT INTO leases(name, holder, pid, host, acquired_at, expires_at, token) VALUES (?,?,?,?,?,?,?) "
                       "ON CONFLICT (name) DO UPDATE SET holder=excluded.holder, pid=excluded.pid, host=excluded.host, "
                       "acquired_at=excluded.acquired_at, expires_at=excluded.expires_at, token=excluded.token",
                       (name, holder, pid, host, acquired, now + ttl, token))
            if token != last:
                db.execute("UPDATE lease_tokens SET token=? WHERE name=?", (token, name))
            if ev is not None:  # events last: a transaction that wrote the log takes no more row locks (PostgreSQL)
                self._event(db, ev[0], name, ev[1])
        return _rec.Lease(name, holder, pid, host, acquired, now + ttl, token)

    def release_lease(self, name: str, holder: str) -> None:
        if self._fence is not None and self._fence.name == name:
            self._fence = None
        with self.tx(fenced=False) as db:
            cur = db.execute("DELETE FROM leases WHERE name=? AND holder=?", (name, holder))
            if cur.rowcount:
                self._event(db, "lease.released", name, {"holder": holder})

    def lease(self, name: str) -> Lease | None:
        rows = self._q("SELECT * FROM leases WHERE name=?", (name,))
        if not rows:
            return None
        r = rows[0]
        return _rec.Lease(r["name"], r["holder"], r["pid"], r["host"], r["acquired_at"], r["expires_at"], int(r["token"]))

    # -- cooldowns and settings -------------------------------------------------
    def cooldown_pass(self, key: str, window: float) -> bool:
        """True (and start a new window) if `key` has not passed within `window`; else count a suppression."""
        now = self.now()
        with self.tx() as db:
            # the row exists before it is read (and, on PostgreSQL, locked): two racing callers cannot both pass
            new = db.execute("INSERT INTO cooldowns VALUES (?,?,0) ON CONFLICT (key) DO NOTHING", (key, now)).rowcount
            if new:
                return True
            r = db.execute(self._for_update("SELECT * FROM cooldowns WHERE key=?"), (key,)).fetchone()
            if now - r["last_at"] >= window:
                db.execute("UPDATE cooldowns SET last_at=?, suppressed=0 WHERE key=?", (now, key))
                return True
            db.execute("UPDATE cooldowns SET suppressed = suppressed + 1 WHERE key=?", (key,))
            return False

    def release_cooldown(self, key: str, since: float) -> bool:
        """Forget `key`'s cooldown window if it started at or after `since` (a notification that was never delivered)."""
        with self.tx() as db:
            return bool(db.execute("DELETE FROM cooldowns WHERE key=? AND last_at>=?", (key, since)).rowcount)

    def setting_text(self, key: str) -> str | None:
        """A setting's stored JSON text (None: unset): a cache keeps it and decodes a fresh copy for each caller."""
        rows = self._q("SELECT value FROM settings WHERE key=?", (key,))
        return rows[0]["value"] if rows else None

    def cooldowns(self) -> dict[str, tuple[float, int]]:
        return {r["key"]: (r["last_at"], r["suppressed"]) for r in self._q("SELECT * FROM cooldowns")}

    def get_setting(self, key: str, default: Any = None) -> Any:
        rows = self._q("SELECT value FROM settings WHERE key=?", (key,))
        return json.loads(rows[0]["value"]) if rows else default

    def get_settings(self, keys: Iterable[str]) -> dict[str, Any]:
        """Several settings in one query (the snapshot reads seven every tick); None for a key never set."""
        keys = list(keys)
        out: dict[str, Any] = dict.fromkeys(keys)
        if keys:
            for r in self._q(f"SELECT key, value FROM settings WHERE key IN ({_placeholders(len(keys))})", keys):
                out[r["key"]] = json.loads(r["value"])
        return out

    def set_setting(self, key: str, value: Any, *, event: str | None = None) -> None:
        with self.tx() as db:
            db.execute("INSERT INTO settings VALUES (?,?) ON CONFLICT (key) DO UPDATE SET value=excluded.value", (key, _j(value)))
            if event:
                self._event(db, event, key, {"value": value})


class _Fenced(Exception):
    """Raised inside a write transaction whose fence no longer holds; `tx` turns it into StaleLease."""

    def __init__(self, lease: Lease, holder: str | None, token: int | None) -> None:
        super().__init__(lease.name)
        self.lease, self.holder, self.token = lease, holder, token


def newer(path: str, version: int) -> HealerError:
    """A store written by a newer healer: this one cannot read it (65, input it does not understand)."""
    return HealerError(f"{path}: store schema version {version} is newer than this healer ({CURRENT}); upgrade healer",
                       INVALID_INPUT)
