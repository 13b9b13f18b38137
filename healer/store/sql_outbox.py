"""The store's notification outbox (healer/notify/outbox.py delivers it), in the SQL both databases speak
(a part of `SqlStore`, healer/store/sql.py)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from healer.store.sql_common import SqlPart, _j, _rec, _Where

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing
if TYPE_CHECKING:
    from typing import Any

    from healer.records import OutboxItem


class OutboxSql(SqlPart):
    """The notification outbox: mixed into SqlStore (healer/store/sql.py)."""

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
