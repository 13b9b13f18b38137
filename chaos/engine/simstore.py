"""The simulated world's store: the real SQLite store with a read-through cache.

A simulated day asks the store for the whole board thousands of times (every supervisor
and dispatcher tick) while most ticks change little of it. Each write to a table bumps
a counter (the store's change tracking, TEMP triggers on the engine's one connection: the dispatcher, the supervisor,
the executor and the notifier all share it), and a cached read is served again only
while the counters of the tables it shows are unchanged. Settings are counted per key
(the dispatcher and the supervisor write a few of them every tick; the others stay
cached). Same answers as the plain store, so the product's logic is untouched: this is
an adapter, not a mirror. It is one by composition: it holds a `SqliteStore` (`inner`), implements the
Store port's ten board reads as cached reads of it, and hands every other call of the port to it unchanged
(`__getattr__`), so no method of the product's store is redefined here and none of its internal calls
(a write reading its own rows back) goes through the cache.

Tickets and agents are kept by row instead (`_Rows`): heartbeats rewrite a running agent's row
every minute and the dispatcher moves or marks a ticket most passes, so neither table stays
unchanged for long. TEMP triggers note the id of every row written (a label's ticket too), and a
read re-reads those rows only; `agents_to_reap` (ended agents) stays cached until a write touches
an ended row. Reads inside a write transaction go to the file.
"""

from __future__ import annotations

import json
from typing import Any

from healer import lifecycle
from healer.store.sqlite import SqliteStore

READS = {  # cached method -> the tables its answer depends on (tickets and agents: kept by row, _Rows)
    # only rows that are (or were, or are newly) ended: the heartbeats of running agents leave it cached
    "agents_to_reap": ("agents_ended",),
    "worktrees": ("worktrees",),
    "proposals": ("proposals",),
    "attempts": ("attempts",),
    "all_attempts": ("attempts", "tickets"),
}
TABLES = sorted({t for ts in READS.values() for t in ts} - {"agents_ended"})


def _key(v: Any) -> Any:
    if isinstance(v, (list, tuple, set, frozenset)):
        return tuple(sorted(v)) if isinstance(v, (set, frozenset)) else tuple(v)
    return v


class CachedStore:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        inner = self.inner = SqliteStore(*args, **kwargs)
        inner.watch_tables(TABLES)
        inner.watch_settings()  # one counter per settings key ('settings:KEY'), next to the tables' counters
        inner.watch_values("agents_ended", "agents", "state", lifecycle.AGENT_ENDED)
        self._cache: dict[tuple, tuple[tuple, Any]] = {}
        self.hits = self.misses = 0
        # heartbeats rewrite a running agent's row every minute and the dispatcher moves or marks a ticket most
        # passes, so neither table is unchanged for long: their rows are kept by id, and only those written since
        # the last read are read again
        self._agent_table = _Rows(self, "agents", {"agents": "id"}, inner.agents, inner.agents_by_ids,
                                  lambda a: (a.started_at, a.id))  # ORDER BY started_at, id
        self._ticket_table = _Rows(self, "tickets", {"tickets": "id", "labels": "ticket_id"}, inner.tickets,
                                   inner.tickets_by_ids, lambda t: (t.priority, t.created_at, t.id))  # ORDER BY priority, created_at, id

    def __getattr__(self, name: str) -> Any:
        # every other method and attribute of the Store port (and of ChangeTracking): the inner store's own
        return getattr(self.__dict__["inner"], name)

    def _read(self, name: str, args: tuple, fn, tables: tuple[str, ...] | None = None):
        if self.inner.in_write():
            # read through: a rollback could bring a version read now back for other rows, and would leave
            # `changes()`'s memo (keyed on SQLite's total_changes, which a rollback does not lower) on counts
            # that never were committed
            self.misses += 1
            return fn()
        ver = tuple(map(self.inner.changes().get, tables or READS[name]))  # None: never written (the same every time)
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
        if self.inner.in_write():
            return self.inner.tickets(states)
        want = None if states is None else set(states)
        return self._ticket_table.select(None if states is None else tuple(sorted(want)),
                                        lambda t: want is None or t.state in want)

    def ticket(self, id):
        if not self.inner.in_write():
            t = self._ticket_table.get(id)
            if t is not None:
                return t
        return self.inner.ticket(id)  # raises NotFound as the store does

    def agents(self, states=None, ticket_id=None):
        if self.inner.in_write():  # a rollback could bring back rows this read would have cached
            return self.inner.agents(states, ticket_id)
        return self._agent_table.select(
            (None if states is None else tuple(sorted(set(states))), ticket_id),
            lambda a, want=None if states is None else set(states): (want is None or a.state in want)
            and (ticket_id is None or a.ticket_id == ticket_id))

    def agents_to_reap(self, host=None):
        return list(self._read("agents_to_reap", (host,), lambda: self.inner.agents_to_reap(host)))

    def worktrees(self, states=("active",)):
        return list(self._read("worktrees", (states,), lambda: self.inner.worktrees(states)))

    def proposals(self, ticket_id=None):
        return list(self._read("proposals", (ticket_id,), lambda: self.inner.proposals(ticket_id)))

    def attempts(self, ticket_id):
        return list(self._read("attempts", (ticket_id,), lambda: self.inner.attempts(ticket_id)))

    def all_attempts(self, *, skip_ticket_states=()):
        got = self._read("all_attempts", (tuple(skip_ticket_states),),
                         lambda: self.inner.all_attempts(skip_ticket_states=skip_ticket_states))
        return {k: list(v) for k, v in got.items()}

    def get_settings(self, keys):
        # per key, each cached as get_setting caches it: a tick rewrites only a few of a set (the last tick times)
        return {k: self.get_setting(k) for k in keys}

    def get_setting(self, key, default=None):
        # the stored JSON text is cached and decoded on each read: every caller gets its own copy of a
        # mapping or a list, for less than a deep copy costs
        text = self._read("get_setting", (key,), lambda: self.inner.setting_text(key), ("settings:" + key,))
        return default if text is None else json.loads(text)


class _Rows:
    """The rows of one table, by id, as its records: a full read first, then only the ids that TEMP triggers on
    the table (and on the tables its records are built from) noted as written since. Callers read outside write
    transactions only (a rollback would bring back rows read inside one)."""

    def __init__(self, store: CachedStore, name: str, sources: dict[str, str], read_all, read_ids, order) -> None:
        self.store, self.dirty = store, f"{name}_dirty"
        self.read_all, self.read_ids, self.order = read_all, read_ids, order
        self.rows: dict[str, Any] | None = None
        self.seen = -1  # the connection's total_changes after the last sync
        self.ordered: tuple[int, list] = (-1, [])
        self.version = 0  # bumped whenever a row changes
        self.views: dict[Any, tuple[int, list]] = {}  # a selection's key -> (version, its records in order)
        store.inner.watch_rows(self.dirty, sources)

    def sync(self) -> dict[str, Any]:
        st = self.store
        total = st.inner.write_count()  # rows this connection changed, ever: the same number, no write since
        if total == self.seen and self.rows is not None:
            st.hits += 1
            return self.rows
        dirty = st.inner.changed_rows(self.dirty)  # emptied before the read: a write after it is noted again
        self.seen = st.inner.write_count()
        if self.rows is None:
            st.misses += 1
            self.rows = {r.id: r for r in self.read_all()}
            self.version += 1
        elif dirty:
            st.misses += 1
            self.version += 1
            for i in range(0, len(dirty), 500):
                part = dirty[i:i + 500]
                for rid in part:
                    self.rows.pop(rid, None)  # deleted, unless it is read back below
                for r in self.read_ids(part):
                    self.rows[r.id] = r
        else:
            st.hits += 1
        return self.rows

    def get(self, rid: str):
        return self.sync().get(rid)

    def select(self, key, keep) -> list:
        rows = self.sync()
        hit = self.views.get(key)
        if hit is not None and hit[0] == self.version:
            return list(hit[1])
        if self.ordered[0] != self.version:  # every row in the store's order, once per version for all views
            self.ordered = (self.version, sorted(rows.values(), key=self.order))
        got = [r for r in self.ordered[1] if keep(r)]
        if len(self.views) > 256:
            self.views.clear()
        self.views[key] = (self.version, got)
        return list(got)
