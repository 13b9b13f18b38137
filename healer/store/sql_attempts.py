"""The store's attempts (one per launch of a ticket's agent) and proposals (a finished attempt's commit,
merged or rejected), in the SQL both databases speak (a part of `SqlStore`, healer/store/sql.py)."""

from __future__ import annotations

from collections.abc import Iterable

from healer import lifecycle
from healer.store.sql_common import SqlPart, _placeholders, _rec

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing
if TYPE_CHECKING:
    from typing import Any

    from healer.records import Attempt, Proposal


class AttemptsSql(SqlPart):
    """Attempts and proposals: mixed into SqlStore (healer/store/sql.py)."""

    def _prop(self, r: Any) -> Proposal:
        return _rec.Proposal(r["id"], r["ticket_id"], r["branch"], r["commit"], r["state"], r["created_at"], r["decided_at"], r["gate_log"])

    def add_proposal(self, ticket_id: str, branch: str, commit: str) -> Proposal:
        with self.tx() as db:
            pid = int(db.execute('INSERT INTO proposals(ticket_id, branch, "commit", state, created_at) VALUES (?,?,?,?,?) RETURNING id',
                                 (ticket_id, branch, commit, "open", self.now())).fetchone()[0])
            self._event(db, "proposal.opened", ticket_id, {"proposal": pid, "branch": branch, "commit": commit})
        return self._prop(self._q("SELECT * FROM proposals WHERE id=?", (pid,))[0])

    def decide_proposal(self, id: int, state: str, gate_log: str = "") -> str:
        """Merge or reject an open proposal; the state it holds afterwards. A proposal decided already keeps its first
        decision: a pass retried after a store failover (its first write took effect, its answer was lost) asks again
        (`merged -> merged`, or `merged -> rejected` once the merge it made is seen as a change on main), and that is
        recognised (`proposal.already_decided`), not a failed pass."""
        with self.tx() as db:
            r = db.execute(self._for_update("SELECT ticket_id, state FROM proposals WHERE id=?"), (id,)).fetchone()
            if r is not None:
                if r["state"] != lifecycle.OPEN and state in lifecycle.PROPOSAL.states \
                        and state != lifecycle.OPEN:
                    self._event(db, "proposal.already_decided", r["ticket_id"], {"proposal": id, "held": r["state"],
                                                                                 "asked": state})
                    return str(r["state"])
                lifecycle.PROPOSAL.check(id, r["state"], state)
            db.execute("UPDATE proposals SET state=?, decided_at=?, gate_log=? WHERE id=?", (state, self.now(), gate_log, id))
            self._event(db, f"proposal.{state}", r["ticket_id"] if r else "", {"proposal": id})
        return state

    def proposals(self, ticket_id: str | None = None) -> list[Proposal]:
        if ticket_id is None:
            rows = self._q("SELECT * FROM proposals ORDER BY id")
        else:
            rows = self._q("SELECT * FROM proposals WHERE ticket_id=? ORDER BY id", (ticket_id,))
        return [self._prop(r) for r in rows]

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
