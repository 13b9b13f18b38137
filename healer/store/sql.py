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
from healer.conventions import ticket_id_problem
from healer.errors import INVALID_INPUT, HealerError, NotFound, StaleLease
from healer.store.migrations import CURRENT

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing
if TYPE_CHECKING:
    from typing import Any

    from healer.clock import Clock
    from healer.records import Agent, Attempt, Comment, Event, Intent, Lease, OutboxItem, Proposal, Ticket, Worktree


class _Records:
    """healer.records, imported the first time a row becomes a record: `healer loop run` only appends
    events and heartbeats, and building the records' ten dataclasses costs more CPU than its git work."""

    def __getattr__(self, name: str):
        from healer import records

        value = getattr(records, name)
        setattr(self, name, value)  # later lookups are plain attribute reads
        return value


_rec = _Records()

FP_TX_COMMIT = failpoints.declare("store.before_commit", "healer/store/sql.py: just before a write transaction commits")


def _j(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


def _placeholders(n: int) -> str:
    return ",".join("?" * n)


class _Where:
    """A WHERE clause built from optional filters: a filter given as None is left out."""

    def __init__(self) -> None:
        self.terms: list[str] = []
        self.args: list[Any] = []

    def add(self, term: str, value: Any) -> _Where:
        if value is not None:
            self.terms.append(term)
            self.args.append(value)
        return self

    def among(self, column: str, values: Iterable[Any] | None) -> _Where:
        if values is not None:
            values = list(values)
            # `IN ()` is SQLite's; PostgreSQL refuses it: an empty list matches nothing, in both
            self.terms.append(f"{column} IN ({_placeholders(len(values))})" if values else "1 = 0")
            self.args += values
        return self

    def sql(self) -> str:
        return (" WHERE " + " AND ".join(self.terms)) if self.terms else ""


class SqlStore:
    """The rules of the store (the port, healer/store/base.py) over a connection an adapter provides."""

    path: str
    root: str
    clock: Clock
    _fence: Lease | None
    _LIKE: str

    # -- what each adapter provides ---------------------------------------------
    def tx(self, *, fenced: bool = True):
        raise NotImplementedError

    def _q(self, sql: str, args: Iterable[Any] = ()) -> list:
        raise NotImplementedError

    def _for_update(self, sql: str) -> str:
        """`sql` (a SELECT inside a write transaction) locking the rows it reads until COMMIT."""
        raise NotImplementedError

    def _skip_locked(self, sql: str) -> str:
        """`sql` (a SELECT that claims rows) skipping the rows another transaction holds."""
        raise NotImplementedError

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

    # -- tickets ----------------------------------------------------------------
    def _ticket_from(self, r: Any, labels: dict[str, float]) -> Ticket:
        # most tickets have no blockers and no data: skip the JSON parser for those (whole-fleet snapshots)
        bb, data = r["blocked_by"], r["data"]
        return _rec.Ticket(
            id=r["id"], title=r["title"], state=r["state"], priority=r["priority"], body=r["body"],
            labels=labels, blocked_by=() if bb == "[]" else tuple(json.loads(bb)), created_at=r["created_at"],
            updated_at=r["updated_at"], data={} if data == "{}" else json.loads(data),
        )

    def _labels(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        rows = self._q("SELECT * FROM labels ORDER BY added_at")
        for r in rows:
            out.setdefault(r["ticket_id"], {})[r["label"]] = r["added_at"]
        return out

    def _next_id(self, db: Any) -> str:
        n = db.execute("SELECT COUNT(*) FROM tickets").fetchone()[0] + 1
        floor = db.execute(self._for_update("SELECT value FROM settings WHERE key=?"), ("tickets.id_floor",)).fetchone()
        if floor is not None:  # an older board's T-N (branches, worktrees) are never reused (healer/store/identity.py)
            n = max(n, int(json.loads(floor["value"])) + 1)
        while db.execute("SELECT 1 FROM tickets WHERE id=?", (f"T-{n}",)).fetchone():
            n += 1
        return f"T-{n}"

    def add_ticket(self, title: str, *, id: str | None = None, body: str = "", priority: int = 2,
                   blocked_by: Iterable[str] = (), labels: Iterable[str] = (), state: str = lifecycle.QUEUED,
                   actor: str = "human", data: dict[str, Any] | None = None) -> Ticket:
        if state not in lifecycle.STATES:
            raise lifecycle.InvalidTransition(f"unknown state {state!r}; states are {', '.join(lifecycle.STATES)}")
        if id is not None and (why := ticket_id_problem(id)):
            raise HealerError(f"ticket id {id!r}: {why}", 65)
        now = self.now()
        with self.tx() as db:
            tid = id or self._next_id(db)
            if db.execute(self._for_update("SELECT 1 FROM tickets WHERE id=?"), (tid,)).fetchone():
                raise HealerError(f"ticket {tid} already exists", 65)
            db.execute(
                "INSERT INTO tickets(id,title,body,state,priority,blocked_by,created_at,updated_at,data) VALUES (?,?,?,?,?,?,?,?,?)",
                (tid, title, body, state, priority, _j(list(blocked_by)), now, now, _j(data or {})),
            )
            for lb in labels:
                db.execute("INSERT INTO labels VALUES (?,?,?) ON CONFLICT (ticket_id, label) DO NOTHING", (tid, lb, now))
            self._event(db, "ticket.created", tid, {"title": title, "state": state, "priority": priority,
                                                    "blocked_by": list(blocked_by), "labels": list(labels), "actor": actor})
        return self.ticket(tid)

    def ticket(self, id: str) -> Ticket:
        rows = self._q("SELECT * FROM tickets WHERE id=?", (id,))
        if not rows:
            raise NotFound(f"no ticket {id!r}")
        labels = {r["label"]: r["added_at"] for r in self._q("SELECT * FROM labels WHERE ticket_id=? ORDER BY added_at", (id,))}
        return self._ticket_from(rows[0], labels)

    def tickets(self, states: Iterable[str] | None = None) -> list[Ticket]:
        w = _Where().among("state", states)
        sql, args = "SELECT * FROM tickets" + w.sql(), w.args
        rows = self._q(sql + " ORDER BY priority, created_at, id", args)
        labels = self._labels()
        return [self._ticket_from(r, labels.get(r["id"], {})) for r in rows]

    def move_ticket(self, id: str, to: str, *, actor: str, reason: str = "", expect: str | None = None) -> Ticket:
        """Move along the lifecycle table. `expect` makes it a compare-and-set (fresh-state precondition)."""
        with self.tx() as db:
            r = db.execute(self._for_update("SELECT state FROM tickets WHERE id=?"), (id,)).fetchone()
            if r is None:
                raise NotFound(f"no ticket {id!r}")
            frm = r["state"]
            if expect is not None and frm != expect:
                raise lifecycle.InvalidTransition(f"{id}: expected state {expect}, found {frm}")
            if frm == to:
                return self.ticket(id)
            ev = lifecycle.check(id, frm, to)
            db.execute("UPDATE tickets SET state=?, updated_at=? WHERE id=?", (to, self.now(), id))
            self._event(db, "ticket.moved", id, {"from": frm, "to": to, "event": ev, "actor": actor, "reason": reason})
        return self.ticket(id)

    def claim_ticket(self, *, actor: str, among: Iterable[str] | None = None, reason: str = "claimed") -> Ticket | None:
        """Move the first queued ticket (priority order, optionally only `among` these ids) to in_progress
        and return it; None when there is none to take. Safe with many dispatchers on one board: on
        PostgreSQL each claim skips tickets another claim holds (FOR UPDATE SKIP LOCKED)."""
        w = _Where().add("state = ?", lifecycle.QUEUED).among("id", among)
        with self.tx() as db:
            sql = self._skip_locked("SELECT id FROM tickets" + w.sql() + " ORDER BY priority, created_at, id LIMIT 1")
            r = db.execute(sql, w.args).fetchone()
            if r is None:
                return None
            tid = r["id"]
            ev = lifecycle.check(tid, lifecycle.QUEUED, lifecycle.IN_PROGRESS)
            db.execute("UPDATE tickets SET state=?, updated_at=? WHERE id=?", (lifecycle.IN_PROGRESS, self.now(), tid))
            self._event(db, "ticket.moved", tid, {"from": lifecycle.QUEUED, "to": lifecycle.IN_PROGRESS, "event": ev,
                                                  "actor": actor, "reason": reason})
        return self.ticket(tid)

    def label(self, id: str, label: str, *, actor: str, at: float | None = None) -> bool:
        """Add a label; `at` (a game day starting mid-story) sets when it was added, re-adding it if present."""
        with self.tx() as db:
            if not db.execute(self._for_update("SELECT 1 FROM tickets WHERE id=?"), (id,)).fetchone():
                raise NotFound(f"no ticket {id!r}")
            then = "DO NOTHING" if at is None else "DO UPDATE SET added_at=excluded.added_at"
            cur = db.execute(f"INSERT INTO labels VALUES (?,?,?) ON CONFLICT (ticket_id, label) {then}",
                             (id, label, self.now() if at is None else at))
            if cur.rowcount:
                if at is None:
                    db.execute("UPDATE tickets SET updated_at=? WHERE id=?", (self.now(), id))
                self._event(db, "ticket.labeled", id, {"label": label, "actor": actor, **({"added_at": at} if at is not None else {})})
            return bool(cur.rowcount)

    def backdate_ticket(self, id: str, created_at: float, *, actor: str) -> None:
        """Say a ticket was created (and last touched) at `created_at`: game days start mid-story."""
        with self.tx() as db:
            cur = db.execute("UPDATE tickets SET created_at=?, updated_at=? WHERE id=?", (created_at, created_at, id))
            if not cur.rowcount:
                raise NotFound(f"no ticket {id!r}")
            self._event(db, "ticket.backdated", id, {"created_at": created_at, "actor": actor})

    def tickets_by_ids(self, ids: Iterable[str]) -> list[Ticket]:
        """These tickets (those that exist), with their labels; in no particular order."""
        ids = list(ids)
        if not ids:
            return []
        marks = _placeholders(len(ids))
        labels: dict[str, dict[str, float]] = {}
        for r in self._q(f"SELECT * FROM labels WHERE ticket_id IN ({marks}) ORDER BY added_at", ids):
            labels.setdefault(r["ticket_id"], {})[r["label"]] = r["added_at"]
        return [self._ticket_from(r, labels.get(r["id"], {})) for r in self._q(f"SELECT * FROM tickets WHERE id IN ({marks})", ids)]

    def agents_by_ids(self, ids: Iterable[str]) -> list[Agent]:
        """These agents (those that exist); in no particular order."""
        ids = list(ids)
        if not ids:
            return []
        return [self._agent_from(r) for r in self._q(f"SELECT * FROM agents WHERE id IN ({_placeholders(len(ids))})", ids)]

    def setting_text(self, key: str) -> str | None:
        """A setting's stored JSON text (None: unset): a cache keeps it and decodes a fresh copy for each caller."""
        rows = self._q("SELECT value FROM settings WHERE key=?", (key,))
        return rows[0]["value"] if rows else None

    def unlabel(self, id: str, label: str, *, actor: str) -> bool:
        with self.tx() as db:
            if not db.execute(self._for_update("SELECT 1 FROM tickets WHERE id=?"), (id,)).fetchone():
                raise NotFound(f"no ticket {id!r}")
            cur = db.execute("DELETE FROM labels WHERE ticket_id=? AND label=?", (id, label))
            if cur.rowcount:
                db.execute("UPDATE tickets SET updated_at=? WHERE id=?", (self.now(), id))
                self._event(db, "ticket.unlabeled", id, {"label": label, "actor": actor})
            return bool(cur.rowcount)

    def comment(self, id: str, body: str, *, author: str) -> Comment:
        now = self.now()
        with self.tx() as db:
            if not db.execute(self._for_update("SELECT 1 FROM tickets WHERE id=?"), (id,)).fetchone():
                raise NotFound(f"no ticket {id!r}")
            cid = int(db.execute("INSERT INTO comments(ticket_id, at, author, body) VALUES (?,?,?,?) RETURNING id",
                                 (id, now, author, body)).fetchone()[0])
            db.execute("UPDATE tickets SET updated_at=? WHERE id=?", (now, id))
            self._event(db, "ticket.commented", id, {"author": author, "comment_id": cid, "chars": len(body)})
            return _rec.Comment(cid, id, now, author, body)

    def comments(self, id: str) -> list[Comment]:
        return [_rec.Comment(r["id"], r["ticket_id"], r["at"], r["author"], r["body"])
                for r in self._q("SELECT * FROM comments WHERE ticket_id=? ORDER BY id", (id,))]

    def set_ticket_data(self, id: str, **data: Any) -> None:
        with self.tx() as db:
            r = db.execute(self._for_update("SELECT data FROM tickets WHERE id=?"), (id,)).fetchone()
            if r is None:
                raise NotFound(f"no ticket {id!r}")
            d = json.loads(r["data"])
            d.update(data)
            db.execute("UPDATE tickets SET data=? WHERE id=?", (_j(d), id))

    def touch_ticket(self, id: str) -> None:
        with self.tx() as db:
            db.execute("UPDATE tickets SET updated_at=? WHERE id=?", (self.now(), id))

    # -- agents -----------------------------------------------------------------
    _AGENT_COLS = ("id", "ticket_id", "state", "kind", "pid", "host", "container", "run_id", "worktree",
                   "started_at", "heartbeat_at", "progress_at", "ended_at", "exit_code")
    _AGENT_SET = ",".join(f"{c}=excluded.{c}" for c in _AGENT_COLS[1:] + ("data",))  # an upsert's new values

    _AGENT_CACHE_MAX = 4096

    def _agent_from(self, r: Any) -> Agent:
        # The board is read every tick and most agent rows are unchanged since the last read: an Agent is
        # frozen, so one built from the very same row values (the row's version) is handed out again
        # instead of decoding its JSON anew. Callers never mutate `data` in place (they write the store).
        key = tuple(r)
        cache = self.__dict__.setdefault("_agent_cache", {})  # lazily: the PostgreSQL store shares this method
        a = cache.get(key)
        if a is None:
            if len(cache) >= max(self._AGENT_CACHE_MAX, 2 * self.__dict__.get("_agent_rows", 0)):
                cache.clear()  # bounded by twice the fleet: a whole-fleet read never evicts its own rows
                self.__dict__.pop("_agent_data", None)
            # a heartbeat changes the row but seldom its data: the same JSON text is decoded once
            texts = self.__dict__.setdefault("_agent_data", {})
            raw = r["data"]
            data = texts.get(raw)
            if data is None:
                data = texts[raw] = json.loads(raw)
            a = cache[key] = _rec.Agent(**{c: r[c] for c in self._AGENT_COLS}, data=data)
        return a

    def upsert_agent(self, agent: Agent) -> None:
        vals = [getattr(agent, c) for c in self._AGENT_COLS] + [_j(agent.data)]
        cols = ",".join(self._AGENT_COLS) + ",data"
        with self.tx() as db:
            existed = db.execute(self._for_update("SELECT 1 FROM agents WHERE id=?"), (agent.id,)).fetchone()
            db.execute(f"INSERT INTO agents({cols}) VALUES ({_placeholders(len(vals))}) ON CONFLICT (id) DO UPDATE SET {self._AGENT_SET}",
                       vals)
            if not existed:
                self._event(db, "agent.registered", agent.id, {"ticket": agent.ticket_id, "pid": agent.pid, "kind": agent.kind,
                                                                "run_id": agent.run_id, "worktree": agent.worktree,
                                                                "container": agent.container})

    def update_agent(self, id: str, **fields: Any) -> None:
        if not fields:
            return
        if "data" in fields:
            fields["data"] = _j(fields["data"])
        bad = set(fields) - set(self._AGENT_COLS) - {"data"}
        if bad:
            raise ValueError(f"unknown agent fields {sorted(bad)}")
        sets = ",".join(f"{k}=?" for k in fields)
        with self.tx() as db:
            if "state" in fields:
                r = db.execute(self._for_update("SELECT state FROM agents WHERE id=?"), (id,)).fetchone()
                if r is not None and r["state"] != fields["state"]:
                    lifecycle.AGENT.check(id, r["state"], fields["state"])
            db.execute(f"UPDATE agents SET {sets} WHERE id=?", (*fields.values(), id))
            if "state" in fields and fields["state"] != "running":
                self._event(db, "agent.ended", id, {"state": fields["state"], "exit_code": fields.get("exit_code")})

    def heartbeat(self, id: str, progress: bool = False) -> None:
        now = self.now()
        with self.tx() as db:
            if progress:
                db.execute("UPDATE agents SET heartbeat_at=?, progress_at=? WHERE id=?", (now, now, id))
            else:
                db.execute("UPDATE agents SET heartbeat_at=? WHERE id=?", (now, id))

    def agent(self, id: str) -> Agent:
        rows = self._q("SELECT * FROM agents WHERE id=?", (id,))
        if not rows:
            raise NotFound(f"no agent {id!r}")
        return self._agent_from(rows[0])

    def agents(self, states: Iterable[str] | None = None, ticket_id: str | None = None) -> list[Agent]:
        w = _Where().among("state", states).add("ticket_id=?", ticket_id)
        sql, args = "SELECT * FROM agents" + w.sql(), w.args
        rows = self._q(sql + " ORDER BY started_at, id", args)
        if len(rows) > self.__dict__.get("_agent_rows", 0):
            self._agent_rows = len(rows)
        return [self._agent_from(r) for r in rows]

    def agents_to_reap(self, host: str | None = None) -> list[Agent]:
        """Ended agents (exited, lost, stopped), on `host` if given, that the dispatcher's reaper still owes something:
        not reaped yet (`data.reaped` not true), or reaped by another host (`data.reaped_by`) and not yet stopped
        here (`data.stopped_here` not true). It asks every pass, so the marks are matched in the store (on the
        compact JSON text, as `events(contains=)` does) rather than the fleet's whole history of ended agents read
        each time; the caller checks each mark again."""
        w = _Where().among("state", lifecycle.AGENT_ENDED).add("host=?", host)
        # the patterns are literals, not bound: SQLite prepares a LIKE on a bound pattern again at every call
        reaped, by, here = (f"data {self._LIKE} '{p}' ESCAPE '!'" for p in ('%"reaped":true%', '%"reaped!_by":%', '%"stopped!_here":true%'))
        w.terms.append(f"NOT ({reaped} AND (NOT {by} OR {here}))")
        rows = self._q("SELECT * FROM agents" + w.sql() + " ORDER BY started_at, id", w.args)
        return [self._agent_from(r) for r in rows]

    # -- worktrees --------------------------------------------------------------
    def add_worktree(self, wt: Worktree) -> None:
        with self.tx() as db:
            db.execute("INSERT INTO worktrees VALUES (?,?,?,?,?,?) ON CONFLICT (path) DO UPDATE SET ticket_id=excluded.ticket_id, "
                       "branch=excluded.branch, created_at=excluded.created_at, state=excluded.state, removed_at=excluded.removed_at",
                       (wt.path, wt.ticket_id, wt.branch, wt.created_at, wt.state, wt.removed_at))
            self._event(db, "worktree.added", wt.path, {"ticket": wt.ticket_id, "branch": wt.branch})

    def update_worktree(self, path: str, **fields: Any) -> None:
        sets = ",".join(f"{k}=?" for k in fields)
        with self.tx() as db:
            db.execute(f"UPDATE worktrees SET {sets} WHERE path=?", (*fields.values(), path))
            if fields.get("state") == "removed":
                self._event(db, "worktree.removed", path, {})

    def worktrees(self, states: Iterable[str] | None = ("active",)) -> list[Worktree]:
        w = _Where().among("state", states)
        sql, args = "SELECT path, ticket_id, branch, created_at, state, removed_at FROM worktrees" + w.sql(), w.args
        return [_rec.Worktree(*r) for r in self._q(sql + " ORDER BY created_at", args)]  # the columns in the record's order

    # -- proposals --------------------------------------------------------------
    def _prop(self, r: Any) -> Proposal:
        return _rec.Proposal(r["id"], r["ticket_id"], r["branch"], r["commit"], r["state"], r["created_at"], r["decided_at"], r["gate_log"])

    def add_proposal(self, ticket_id: str, branch: str, commit: str) -> Proposal:
        with self.tx() as db:
            pid = int(db.execute('INSERT INTO proposals(ticket_id, branch, "commit", state, created_at) VALUES (?,?,?,?,?) RETURNING id',
                                 (ticket_id, branch, commit, "open", self.now())).fetchone()[0])
            self._event(db, "proposal.opened", ticket_id, {"proposal": pid, "branch": branch, "commit": commit})
        return self._prop(self._q("SELECT * FROM proposals WHERE id=?", (pid,))[0])

    def decide_proposal(self, id: int, state: str, gate_log: str = "") -> None:
        with self.tx() as db:
            r = db.execute(self._for_update("SELECT ticket_id, state FROM proposals WHERE id=?"), (id,)).fetchone()
            if r is not None:
                lifecycle.PROPOSAL.check(id, r["state"], state)
            db.execute("UPDATE proposals SET state=?, decided_at=?, gate_log=? WHERE id=?", (state, self.now(), gate_log, id))
            self._event(db, f"proposal.{state}", r["ticket_id"] if r else "", {"proposal": id})

    def proposals(self, ticket_id: str | None = None) -> list[Proposal]:
        if ticket_id is None:
            rows = self._q("SELECT * FROM proposals ORDER BY id")
        else:
            rows = self._q("SELECT * FROM proposals WHERE ticket_id=? ORDER BY id", (ticket_id,))
        return [self._prop(r) for r in rows]

    # -- attempts ---------------------------------------------------------------
    def _att(self, r: Any) -> Attempt:
        return _rec.Attempt(r["id"], r["ticket_id"], r["kind"], r["at"], r["run_id"], r["ended_at"], r["exit_code"],
                       r["failure_signature"], r["state_hash"], r["head"], r["gate_log_tail"])

    def add_attempt(self, ticket_id: str, kind: str, run_id: str | None = None, head: str | None = None,
                    host: str | None = None) -> Attempt:
        """`host` (several hosts) is recorded in the `attempt.started` event: which host runs it."""
        with self.tx() as db:
            aid = int(db.execute("INSERT INTO attempts(ticket_id, kind, at, run_id, head) VALUES (?,?,?,?,?) RETURNING id",
                                 (ticket_id, kind, self.now(), run_id, head)).fetchone()[0])
            self._event(db, "attempt.started", ticket_id, {"attempt": aid, "kind": kind, "run_id": run_id,
                                                           **({"host": host} if host else {})})
        return self._att(self._q("SELECT * FROM attempts WHERE id=?", (aid,))[0])

    def finish_attempt(self, id: int, **fields: Any) -> None:
        fields.setdefault("ended_at", self.now())
        sets = ",".join(f"{k}=?" for k in fields)
        with self.tx() as db:
            db.execute(f"UPDATE attempts SET {sets} WHERE id=?", (*fields.values(), id))
            r = db.execute(self._for_update("SELECT ticket_id FROM attempts WHERE id=?"), (id,)).fetchone()
            self._event(db, "attempt.ended", r["ticket_id"] if r else "", {"attempt": id, **{k: v for k, v in fields.items() if k != "gate_log_tail"}})

    def attempts(self, ticket_id: str) -> list[Attempt]:
        return [self._att(r) for r in self._q("SELECT * FROM attempts WHERE ticket_id=? ORDER BY id", (ticket_id,))]

    def all_attempts(self, *, skip_ticket_states: Iterable[str] = ()) -> dict[str, list[Attempt]]:
        """Every attempt, grouped by ticket, oldest first: one query for a whole-fleet snapshot.
        `skip_ticket_states` leaves out tickets in those states (finished tickets' history)."""
        out: dict[str, list[Attempt]] = {}
        skip = list(skip_ticket_states)
        sql, args = "SELECT * FROM attempts ORDER BY id", []
        if skip:
            sql = (f"SELECT a.* FROM attempts a JOIN tickets t ON t.id = a.ticket_id "
                   f"WHERE t.state NOT IN ({_placeholders(len(skip))}) ORDER BY a.id")
            args = skip
        for r in self._q(sql, args):
            out.setdefault(r["ticket_id"], []).append(self._att(r))
        return out

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
    def acquire_lease(self, name: str, holder: str, pid: int, host: str, ttl: float, *, pid_alive=None) -> Lease | None:
        """Take or renew `name`. Taken over when expired, or when its holder's pid is gone on this host.
        A new holder gets the next fencing token; a renewal keeps it (and fails if the token moved on)."""
        now = self.now()
        with self.tx(fenced=False) as db:
            # the name's token row exists first and is locked (PostgreSQL: FOR UPDATE): acquirers queue on it
            db.execute("INSERT INTO lease_tokens VALUES (?,?) ON CONFLICT (name) DO NOTHING", (name, 0))
            last = int(db.execute(self._for_update("SELECT token FROM lease_tokens WHERE name=?"), (name,)).fetchone()["token"])
            r = db.execute(self._for_update("SELECT * FROM leases WHERE name=?"), (name,)).fetchone()
            ev: tuple[str, dict] | None = None
            if r is not None and r["holder"] != holder:
                expired = r["expires_at"] <= now
                dead = r["host"] == host and pid_alive is not None and not pid_alive(r["pid"])
                if not (expired or dead):
                    return None
                token = last + 1
                ev = ("lease.taken_over", {"from": r["holder"], "to": holder, "expired": expired, "holder_dead": dead,
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

    # -- the notification outbox --------------------------------------------------
    def _outbox_item(self, r: Any) -> OutboxItem:
        return _rec.OutboxItem(r["id"], r["key"], r["notifier"], r["idem"], json.loads(r["payload"]), r["state"], r["created_at"],
                          r["next_at"], r["expires_at"], r["tries"], r["last_error"], r["claimed_by"], r["claim_until"],
                          r["delivered_at"])

    def enqueue_notification(self, key: str, window: float, idem: str, rows: Iterable[tuple[str, dict[str, Any]]],
                             expires_at: float, sent: dict[str, Any]) -> bool:
        """Atomically: refuse (and count a suppression) if `key` is owed or inside its cooldown window; otherwise start
        the window, owe one row per (notifier fingerprint, payload) and record `notify.sent` with `sent` as payload."""
        now = self.now()
        with self.tx() as db:
            # the key's cooldown row, locked (PostgreSQL) so two processes notifying one key take turns
            db.execute("INSERT INTO cooldowns(key, last_at, suppressed) VALUES (?,?,0) ON CONFLICT(key) DO NOTHING",
                       (key, -1e18))
            r = db.execute(self._for_update("SELECT last_at FROM cooldowns WHERE key=?"), (key,)).fetchone()
            owed = db.execute(self._for_update("SELECT 1 FROM outbox WHERE key=? AND state='pending' LIMIT 1"), (key,)).fetchone()
            if owed or (r is not None and now - r["last_at"] < window):
                if r is not None:
                    db.execute("UPDATE cooldowns SET suppressed = suppressed + 1 WHERE key=?", (key,))
                return False
            db.execute("INSERT INTO cooldowns(key, last_at, suppressed) VALUES (?,?,0) "
                       "ON CONFLICT(key) DO UPDATE SET last_at=excluded.last_at, suppressed=0", (key, now))
            for fp, payload in rows:
                db.execute("INSERT INTO outbox(key, notifier, idem, payload, state, created_at, next_at, expires_at) "
                           "VALUES (?,?,?,?,?,?,?,?)", (key, fp, idem, _j(payload), "pending", now, now, expires_at))
            self._event(db, "notify.sent", key, {**sent, "idem": idem})
            return True

    def outbox(self, states: Iterable[str] | None = None, *, key: str | None = None, idem: str | None = None,
               limit: int | None = None) -> list[OutboxItem]:
        w = _Where().among("state", states).add("key=?", key).add("idem=?", idem)
        sql, args = "SELECT * FROM outbox" + w.sql() + " ORDER BY id", w.args
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return [self._outbox_item(r) for r in self._q(sql, args)]

    def outbox_claim(self, holder: str, *, limit: int = 50, lease: float = 60.0,
                     dead=None) -> tuple[list[OutboxItem], list[OutboxItem]]:
        """Claim due pending rows for `lease` seconds (another worker skips them); expire the overdue ones.

        Returns (claimed, expired). A worker that dies mid-delivery loses its claim when the lease runs out, or at
        once when `dead(holder)` says its holder is gone (a courier on this host whose process is dead)."""
        now = self.now()
        with self.tx() as db:
            if dead is not None:
                held = [r[0] for r in db.execute("SELECT DISTINCT claimed_by FROM outbox WHERE state='pending' AND "
                                                 "claimed_by IS NOT NULL AND claim_until>?", (now,)).fetchall()]
                for h in held:
                    if h != holder and dead(h):
                        db.execute("UPDATE outbox SET claimed_by=NULL, claim_until=NULL WHERE state='pending' AND "
                                   "claimed_by=?", (h,))
            gone = [self._outbox_item(r) for r in db.execute(self._skip_locked(
                "SELECT * FROM outbox WHERE state='pending' AND expires_at<=? ORDER BY id"), (now,)).fetchall()]
            for it in gone:
                db.execute("UPDATE outbox SET state='expired', claimed_by=NULL, claim_until=NULL WHERE id=?", (it.id,))
                self._event(db, "notify.expired", it.key, {"outbox": it.id, "notifier": it.payload.get("notifier", it.notifier),
                                                           "idem": it.idem, "tries": it.tries,
                                                           "reason": f"undelivered at its expiry; last error: {it.last_error or '-'}"})
            # PostgreSQL: FOR UPDATE SKIP LOCKED, so couriers on other hosts never claim the same row
            rows = db.execute(self._skip_locked("SELECT * FROM outbox WHERE state='pending' AND next_at<=? AND "
                                                "(claim_until IS NULL OR claim_until<=?) ORDER BY next_at, id LIMIT ?"),
                              (now, now, limit)).fetchall()
            for r in rows:
                db.execute("UPDATE outbox SET claimed_by=?, claim_until=? WHERE id=?", (holder, now + lease, r["id"]))
        return [self._outbox_item(r) for r in rows], gone

    def outbox_delivered(self, id: int) -> bool:
        """Mark a row delivered (once: a second worker's late success is not a second event) and restart its key's cooldown."""
        now = self.now()
        with self.tx() as db:
            r = db.execute(self._for_update("SELECT * FROM outbox WHERE id=?"), (id,)).fetchone()
            if r is None or r["state"] != "pending":
                return False
            db.execute("UPDATE outbox SET state='delivered', delivered_at=?, tries=tries+1, claimed_by=NULL, claim_until=NULL "
                       "WHERE id=?", (now, id))
            db.execute("INSERT INTO cooldowns(key, last_at, suppressed) VALUES (?,?,0) "
                       "ON CONFLICT(key) DO UPDATE SET last_at=excluded.last_at", (r["key"], now))
            self._event(db, "notify.delivered", r["key"], {"outbox": id, "notifier": json.loads(r["payload"]).get("notifier", ""),
                                                           "idem": r["idem"], "tries": r["tries"] + 1,
                                                           "latency_s": round(now - r["created_at"], 3)})
            return True

    def outbox_failed(self, id: int, *, error: str, next_at: float, final: str | None = None) -> bool:
        """Record a failed try: back to pending at `next_at`, or `final` ('rejected') when retrying cannot help."""
        with self.tx() as db:
            r = db.execute(self._for_update("SELECT * FROM outbox WHERE id=?"), (id,)).fetchone()
            if r is None or r["state"] != "pending":
                return False
            state = final or "pending"
            db.execute("UPDATE outbox SET state=?, tries=tries+1, last_error=?, next_at=?, claimed_by=NULL, claim_until=NULL "
                       "WHERE id=?", (state, error, next_at, id))
            self._event(db, f"notify.{final}" if final else "notify.failed", r["key"],
                        {"outbox": id, "notifier": json.loads(r["payload"]).get("notifier", ""), "idem": r["idem"],
                         "tries": r["tries"] + 1, "reason": error, **({} if final else {"retry_at": next_at})})
            return True

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
