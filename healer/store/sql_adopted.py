"""The store's adopted loops (issue 44, docs/adopt.md), in the SQL both databases speak (a part of `SqlStore`,
healer/store/sql.py, whose conventions it follows): each write records its event in the same transaction."""

from __future__ import annotations

import json
from collections.abc import Iterable

from healer.errors import NotFound
from healer.store.sql_common import SqlPart, _j, _placeholders, _rec, _Where

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing
if TYPE_CHECKING:
    from typing import Any

    from healer.records import Adopted

ADOPTED_STATES = ("adopted", "gone", "stopped")


class AdoptedSql(SqlPart):
    """Adopted loops: mixed into SqlStore (healer/store/sql.py)."""

    _ADOPTED_COLS = ("id", "rule", "host", "pid", "pgid", "start_ticks", "started_at", "cwd", "worktree", "cli",
                     "session_id", "state", "adopted_at", "ended_at")

    def _adopted_from(self, r: Any) -> Adopted:
        return _rec.Adopted(**{c: r[c] for c in self._ADOPTED_COLS}, data=json.loads(r["data"]))

    def register_adopted(self, a: Adopted) -> bool:
        """Insert `a` unless its id is known (an id is pid + start time: one row per process ever); True when new."""
        vals = [getattr(a, c) for c in self._ADOPTED_COLS] + [_j(a.data)]
        cols = ",".join(self._ADOPTED_COLS) + ",data"
        with self.tx() as db:
            if db.execute(self._for_update("SELECT 1 FROM adopted WHERE id=?"), (a.id,)).fetchone():
                return False
            db.execute(f"INSERT INTO adopted({cols}) VALUES ({_placeholders(len(vals))})", vals)
            self._event(db, "adopt.registered", a.id, {
                "rule": a.rule, "pid": a.pid, "pgid": a.pgid, "start_ticks": a.start_ticks, "cwd": a.cwd,
                "worktree": a.worktree, "cli": a.cli, "session_id": a.session_id, "host": a.host})
            return True

    def adopted(self, states: Iterable[str] | None = ("adopted",), host: str | None = None) -> list[Adopted]:
        w = _Where().among("state", states).add("host=?", host)
        return [self._adopted_from(r) for r in self._q("SELECT * FROM adopted" + w.sql() + " ORDER BY adopted_at, id", w.args)]

    def adopted_one(self, id: str) -> Adopted:
        rows = self._q("SELECT * FROM adopted WHERE id=?", (id,))
        if not rows:
            raise NotFound(f"no adopted loop {id!r}")
        return self._adopted_from(rows[0])

    def update_adopted(self, id: str, *, state: str | None = None, data: dict[str, Any] | None = None,
                       session_id: str | None = None, ended_at: float | None = None, event: str | None = None,
                       payload: dict[str, Any] | None = None) -> None:
        """Change an adopted loop's state or data; `event` (with `payload`) is recorded in the same transaction."""
        if state is not None and state not in ADOPTED_STATES:
            raise ValueError(f"adopted state {state!r}, expected one of {ADOPTED_STATES}")
        sets: dict[str, Any] = {}
        if state is not None:
            sets["state"] = state
        if data is not None:
            sets["data"] = _j(data)
        if session_id is not None:
            sets["session_id"] = session_id
        if ended_at is not None:
            sets["ended_at"] = ended_at
        with self.tx() as db:
            if sets:
                db.execute(f"UPDATE adopted SET {','.join(f'{k}=?' for k in sets)} WHERE id=?", (*sets.values(), id))
            if event:
                self._event(db, event, id, payload or {})
