"""The store's tickets, their labels and comments, in the SQL both databases speak (a part of `SqlStore`,
healer/store/sql.py, whose conventions it follows)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from healer import lifecycle
from healer.conventions import ticket_id_problem
from healer.errors import HealerError, NotFound
from healer.store.sql_common import SqlPart, _j, _placeholders, _rec, _Where

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing
if TYPE_CHECKING:
    from typing import Any

    from healer.records import Comment, Ticket


class TicketsSql(SqlPart):
    """Tickets, labels, comments: mixed into SqlStore (healer/store/sql.py)."""

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
