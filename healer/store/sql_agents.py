"""The store's agents and worktrees, in the SQL both databases speak (a part of `SqlStore`, healer/store/sql.py,
whose conventions it follows)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from healer import lifecycle
from healer.errors import NotFound
from healer.store.sql_common import SqlPart, _j, _placeholders, _rec, _Where

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing
if TYPE_CHECKING:
    from typing import Any

    from healer.records import Agent, Worktree


_AGENT_COLS = ("id", "ticket_id", "state", "kind", "pid", "host", "container", "run_id", "worktree",
               "started_at", "heartbeat_at", "progress_at", "ended_at", "exit_code")


class AgentMemo:
    """The agents already built from rows, one per store (SqlStore.__init__). The board is read every tick and most
    agent rows are unchanged since the last read: an Agent is frozen, so one built from the very same row values
    (the row's version) is handed out again instead of decoding its JSON anew. Callers never mutate `data` in place
    (they write the store)."""

    MAX = 4096

    def __init__(self) -> None:
        self.agents: dict[tuple, Agent] = {}
        self.data: dict[str, Any] = {}  # a heartbeat changes the row but seldom its data: the same JSON text is decoded once
        self.fleet = 0  # the most rows a whole read returned: never evicted by a read of the whole fleet

    def agent(self, r: Any) -> Agent:
        key = tuple(r)
        a = self.agents.get(key)
        if a is None:
            if len(self.agents) >= max(self.MAX, 2 * self.fleet):
                self.agents.clear()  # bounded by twice the fleet: a whole-fleet read never evicts its own rows
                self.data.clear()
            raw = r["data"]
            data = self.data.get(raw)
            if data is None:
                data = self.data[raw] = json.loads(raw)
            a = self.agents[key] = _rec.Agent(**{c: r[c] for c in _AGENT_COLS}, data=data)
        return a


class AgentsSql(SqlPart):
    """Agents and worktrees: mixed into SqlStore (healer/store/sql.py)."""

    _AGENT_COLS = _AGENT_COLS
    _AGENT_SET = ",".join(f"{c}=excluded.{c}" for c in _AGENT_COLS[1:] + ("data",))  # an upsert's new values
    _agent_memo: AgentMemo  # SqlStore.__init__'s

    def _agent_from(self, r: Any) -> Agent:
        return self._agent_memo.agent(r)

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
        self._agent_memo.fleet = max(self._agent_memo.fleet, len(rows))
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

    def agents_by_ids(self, ids: Iterable[str]) -> list[Agent]:
        """These agents (those that exist); in no particular order."""
        ids = list(ids)
        if not ids:
            return []
        return [self._agent_from(r) for r in self._q(f"SELECT * FROM agents WHERE id IN ({_placeholders(len(ids))})", ids)]

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
