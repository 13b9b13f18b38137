"""The simulated world's store: the real SQLite store with a read-through cache.

A simulated day asks the store for the whole board thousands of times (every supervisor
and dispatcher tick) while most ticks change little of it. Each write to a table bumps
a counter (TEMP triggers on the engine's one connection: the dispatcher, the supervisor,
the executor and the notifier all share it), and a cached read is served again only
while the counters of the tables it shows are unchanged. Settings are counted per key
(the dispatcher and the supervisor write a few of them every tick; the others stay
cached). Same answers as the plain store, so the product's logic is untouched: this is
an adapter, not a mirror.
"""

from __future__ import annotations

import json
from typing import Any

from healer.store.sqlite import SqliteStore

READS = {  # cached method -> the tables its answer depends on
    "tickets": ("tickets", "labels"),
    "ticket": ("tickets", "labels"),
    "agents": ("agents",),
    "agents_to_reap": ("agents",),
    "worktrees": ("worktrees",),
    "proposals": ("proposals",),
    "attempts": ("attempts",),
    "all_attempts": ("attempts", "tickets"),
}
TABLES = sorted({t for ts in READS.values() for t in ts})


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
        self._cache: dict[tuple, tuple[tuple, Any]] = {}
        self.hits = self.misses = 0

    def _read(self, name: str, args: tuple, fn, tables: tuple[str, ...] | None = None):
        counts = self.changes()
        ver = tuple(counts.get(t, 0) for t in (tables or READS[name]))
        key = (name, *map(_key, args))
        hit = self._cache.get(key)
        if hit is not None and hit[0] == ver:
            self.hits += 1
            return hit[1]
        self.misses += 1
        val = fn()
        if not self._db.in_transaction:  # read inside a write transaction: a rollback could bring this version back
            self._cache[key] = (ver, val)
        return val

    # lists are copied on the way out: a caller may sort or extend what it got
    def tickets(self, states=None):
        return list(self._read("tickets", (states,), lambda: super(CachedStore, self).tickets(states)))

    def ticket(self, id):
        return self._read("ticket", (id,), lambda: super(CachedStore, self).ticket(id))

    def agents(self, states=None, ticket_id=None):
        return list(self._read("agents", (states, ticket_id), lambda: super(CachedStore, self).agents(states, ticket_id)))

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

    def get_setting(self, key, default=None):
        # the stored JSON text is cached and decoded on each read: every caller gets its own copy of a
        # mapping or a list, for less than a deep copy costs
        rows = self._read("get_setting", (key,), lambda: self._q("SELECT value FROM settings WHERE key=?", (key,)),
                          ("settings:" + key,))
        return json.loads(rows[0]["value"]) if rows else default
