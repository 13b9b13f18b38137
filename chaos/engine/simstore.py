"""The simulated world's store: the real SQLite store with a read-through cache.

A simulated day asks the store for the whole board thousands of times (every supervisor
and dispatcher tick) while most ticks change little of it. Each write to a table bumps
a counter (TEMP triggers on the engine's one connection: the dispatcher, the supervisor,
the executor and the notifier all share it), and a cached read is served again only
while the counters of the tables it shows are unchanged. Settings are counted per key
(the dispatcher and the supervisor write a few of them every tick; the others stay
cached). Same answers as the plain store, so the product's logic is untouched: this is
an adapter, not a mirror.

Heartbeats are most of the writes to `agents` (every live agent's loop, every dispatcher pass), so
the agents table is never unchanged for long. Its rows are kept by id instead: TEMP triggers note the
id of every row written, an agents read re-reads those rows only, and `agents_to_reap` (ended agents)
stays cached until a write touches an ended row. Reads inside a write transaction go to the file.
"""

from __future__ import annotations

import json
from typing import Any

from healer import lifecycle
from healer.store.sqlite import SqliteStore

READS = {  # cached method -> the tables its answer depends on
    "tickets": ("tickets", "labels"),
    "ticket": ("tickets", "labels"),
    # only rows that are (or were, or are newly) ended: the heartbeats of running agents leave it cached
    "agents_to_reap": ("agents_ended",),
    "worktrees": ("worktrees",),
    "proposals": ("proposals",),
    "attempts": ("attempts",),
    "all_attempts": ("attempts", "tickets"),
}
TABLES = sorted({t for ts in READS.values() for t in ts} - {"agents_ended"})


def _agent_order(a) -> tuple:
    return (a.started_at, a.id)


def _key(v: Any) -> Any:
    if isinstance(v, (list, tuple, set, frozenset)):
        return tuple(sorted(v)) if isinstance(v, (set, frozenset)) else tuple(v)
    return v


class CachedStore(SqliteStore):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.watch_tables(TABLES)
        with self.tx() as db:  # one counter per settings key ('settings:KEY'), next to the tables' counters
            for op, row in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("UPDATE", "OLD"), ("DELETE", "OLD")):
                db.execute(f"CREATE TEMP TRIGGER IF NOT EXISTS watch_setting_{op.lower()}_{row.lower()} AFTER {op} "
                           f"ON main.settings BEGIN INSERT INTO changes VALUES ('settings:' || {row}.key, 1) "
                           f"ON CONFLICT(tbl) DO UPDATE SET n = n + 1; END")
            # agents: a heartbeat rewrites a running agent's row every minute, so the agents table is never
            # unchanged for long; each written row's id is noted, and a read re-reads those rows only
            db.execute("CREATE TEMP TABLE IF NOT EXISTS agents_dirty(id TEXT PRIMARY KEY)")
            ended = ",".join(f"'{s}'" for s in lifecycle.AGENT_ENDED)
            db.execute("INSERT OR IGNORE INTO temp.changes VALUES ('agents_ended', 0)")
            bump = "UPDATE changes SET n = n + 1 WHERE tbl = 'agents_ended';"
            for op, rows, when in (("INSERT", ("NEW",), ""),  # any insert (a REPLACE fires no delete trigger)
                                   ("UPDATE", ("NEW", "OLD"), f"WHEN OLD.state IN ({ended}) OR NEW.state IN ({ended})"),
                                   ("DELETE", ("OLD",), "")):
                note = " ".join(f"INSERT OR IGNORE INTO agents_dirty VALUES ({r}.id);" for r in rows)
                db.execute(f"CREATE TEMP TRIGGER IF NOT EXISTS dirty_agents_{op.lower()} AFTER {op} ON main.agents "
                           f"BEGIN {note} END")
                db.execute(f"CREATE TEMP TRIGGER IF NOT EXISTS watch_agents_ended_{op.lower()} AFTER {op} ON main.agents "
                           f"{when} BEGIN {bump} END")
        self._cache: dict[tuple, tuple[tuple, Any]] = {}
        self._agents: dict[str, Any] | None = None  # every agent row, by id, as last read
        self._agents_ver = 0  # bumped whenever a row of it changes
        self._agent_views: dict[tuple, tuple[int, list]] = {}  # (states, ticket) -> (version, the agents it selects)
        self.hits = self.misses = 0

    def _read(self, name: str, args: tuple, fn, tables: tuple[str, ...] | None = None):
        if self._db.in_transaction:
            # read through: a rollback could bring a version read now back for other rows, and would leave
            # `changes()`'s memo (keyed on SQLite's total_changes, which a rollback does not lower) on counts
            # that never were committed
            self.misses += 1
            return fn()
        ver = tuple(map(self.changes().get, tables or READS[name]))  # None: never written (the same every time)
        key = (name, *[a if a is None or type(a) is str else _key(a) for a in args])
        hit = self._cache.get(key)
        if hit is not None and hit[0] == ver:
            self.hits += 1
            return hit[1]
        self.misses += 1
        val = fn()
        self._cache[key] = (ver, val)
        return val

    # lists are copied on the way out: a caller may sort or extend what it got
    def tickets(self, states=None):
        return list(self._read("tickets", (states,), lambda: super(CachedStore, self).tickets(states)))

    def ticket(self, id):
        return self._read("ticket", (id,), lambda: super(CachedStore, self).ticket(id))

    def agents(self, states=None, ticket_id=None):
        if self._db.in_transaction:  # a rollback could bring back rows this read would have cached
            return super().agents(states, ticket_id)
        rows = self._agents
        dirty = [r[0] for r in self._db.execute("SELECT id FROM temp.agents_dirty")]
        if dirty or rows is None:
            self._db.execute("DELETE FROM temp.agents_dirty")  # before the read: a write after it is noted again
        if rows is None:
            self.misses += 1
            rows = self._agents = {a.id: a for a in super().agents()}
            self._agents_ver += 1
        elif dirty:
            self._agents_ver += 1
            self.misses += 1
            for i in range(0, len(dirty), 500):
                part = dirty[i:i + 500]
                for aid in part:
                    rows.pop(aid, None)  # deleted, unless it is read back below
                marks = ",".join("?" * len(part))
                for r in self._q(f"SELECT * FROM agents WHERE id IN ({marks})", part):
                    rows[r["id"]] = self._agent_from(r)
        else:
            self.hits += 1
        key = (None if states is None else tuple(sorted(set(states))), ticket_id)
        hit = self._agent_views.get(key)
        if hit is not None and hit[0] == self._agents_ver:
            return list(hit[1])
        want = None if states is None else set(states)
        got = [a for a in rows.values() if (want is None or a.state in want) and (ticket_id is None or a.ticket_id == ticket_id)]
        got.sort(key=_agent_order)  # the store's ORDER BY started_at, id
        if len(self._agent_views) > 256:
            self._agent_views.clear()
        self._agent_views[key] = (self._agents_ver, got)
        return list(got)

    def agents_to_reap(self, host=None):
        return list(self._read("agents_to_reap", (host,), lambda: super(CachedStore, self).agents_to_reap(host)))

    def worktrees(self, states=("active",)):
        return list(self._read("worktrees", (states,), lambda: super(CachedStore, self).worktrees(states)))

    def proposals(self, ticket_id=None):
        return list(self._read("proposals", (ticket_id,), lambda: super(CachedStore, self).proposals(ticket_id)))

    def attempts(self, ticket_id):
        return list(self._read("attempts", (ticket_id,), lambda: super(CachedStore, self).attempts(ticket_id)))

    def all_attempts(self, *, skip_ticket_states=()):
        got = self._read("all_attempts", (tuple(skip_ticket_states),),
                         lambda: super(CachedStore, self).all_attempts(skip_ticket_states=skip_ticket_states))
        return {k: list(v) for k, v in got.items()}

    def get_settings(self, keys):
        # per key, each cached as get_setting caches it: a tick rewrites only a few of a set (the last tick times)
        return {k: self.get_setting(k) for k in keys}

    def get_setting(self, key, default=None):
        # the stored JSON text is cached and decoded on each read: every caller gets its own copy of a
        # mapping or a list, for less than a deep copy costs
        rows = self._read("get_setting", (key,), lambda: self._q("SELECT value FROM settings WHERE key=?", (key,)),
                          ("settings:" + key,))
        return json.loads(rows[0]["value"]) if rows else default
