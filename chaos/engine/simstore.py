"""The simulated world's store: the real SQLite store with a read-through cache.

A simulated day asks the store for the whole board thousands of times (every supervisor
and dispatcher tick) while most ticks change little of it. Each write to a table bumps
a counter (TEMP triggers on the engine's one connection: the dispatcher, the supervisor,
the executor and the notifier all share it), and a cached read is served again only
while the counters of the tables it shows are unchanged. Settings are counted per key
(the dispatcher and the supervisor write a few of them every tick; the others stay
cached). Same answers as the plain store, so the product's logic is untouched: this is
an adapter, not a mirror.

Heartbeats are most of the writes to `agents` (every live agent's loop, every dispatcher pass),
and each would send every cached agents answer back to the file. So TEMP triggers also note which
rows had their heartbeat columns changed (`beaten`) and count the writes that changed anything else
(`agents:other`): while that count stands still, the cached agents answers keep their members and
order, and the next agents read patches the beaten records in them from the file instead.
"""

from __future__ import annotations

import json
from typing import Any

from healer.records import Agent
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
BEAT_COLS = ("heartbeat_at", "progress_at")  # what Store.heartbeat writes
AGENT_READS = ("agents", "agents_to_reap")  # answers a heartbeat patches


def _key(v: Any) -> Any:
    if isinstance(v, (list, tuple, set, frozenset)):
        return tuple(sorted(v)) if isinstance(v, (set, frozenset)) else tuple(v)
    return v


class CachedStore(SqliteStore):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._cache: dict[tuple, tuple[tuple, Any]] = {}
        self._agent_keys: set[tuple] = set()  # the cached agents answers (heartbeats patch them)
        self._agent_pos: dict[tuple, dict[str, int]] = {}  # such an answer's agent ids -> places
        super().__init__(*args, **kwargs)
        self.watch_tables(TABLES)
        with self.tx() as db:  # one counter per settings key ('settings:KEY'), next to the tables' counters
            for op, row in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("UPDATE", "OLD"), ("DELETE", "OLD")):
                db.execute(f"CREATE TEMP TRIGGER IF NOT EXISTS watch_setting_{op.lower()}_{row.lower()} AFTER {op} "
                           f"ON main.settings BEGIN INSERT INTO changes VALUES ('settings:' || {row}.key, 1) "
                           f"ON CONFLICT(tbl) DO UPDATE SET n = n + 1; END")
        with self.tx() as db:  # agents rows whose heartbeat columns changed; writes that changed anything else
            cols = [r["name"] for r in db.execute("PRAGMA table_info(agents)") if r["name"] not in BEAT_COLS]
            other = " OR ".join(f'OLD."{c}" IS NOT NEW."{c}"' for c in cols)
            beat = " OR ".join(f'OLD."{c}" IS NOT NEW."{c}"' for c in BEAT_COLS)
            db.execute("INSERT OR IGNORE INTO temp.changes VALUES ('agents:other', 0)")
            for op, when in (("INSERT", ""), ("DELETE", ""), ("UPDATE", f" WHEN {other}")):
                db.execute(f"CREATE TEMP TRIGGER IF NOT EXISTS watch_agents_other_{op.lower()} AFTER {op} ON main.agents"
                           f"{when} BEGIN UPDATE changes SET n = n + 1 WHERE tbl = 'agents:other'; END")
            db.execute("CREATE TEMP TABLE IF NOT EXISTS beaten(id TEXT PRIMARY KEY)")
            db.execute(f"CREATE TEMP TRIGGER IF NOT EXISTS watch_agents_beat AFTER UPDATE ON main.agents WHEN {beat} "
                       f"BEGIN INSERT OR IGNORE INTO beaten VALUES (NEW.id); END")
        c = self.changes()
        self._agents_base = (c.get("agents"), c.get("agents:other"))  # the counters at the last _sync_agents
        self.hits = self.misses = 0

    def _read(self, name: str, args: tuple, fn, tables: tuple[str, ...] | None = None):
        if self._db.in_transaction:
            # read through: a rollback could bring a version read now back for other rows, and would leave
            # `changes()`'s memo (keyed on SQLite's total_changes, which a rollback does not lower) on counts
            # that never were committed
            self.misses += 1
            return fn()
        if name in AGENT_READS:
            self._sync_agents()
        ver = tuple(map(self.changes().get, tables or READS[name]))  # None: never written (the same every time)
        key = (name, *[a if a is None or type(a) is str else _key(a) for a in args])
        hit = self._cache.get(key)
        if hit is not None and hit[0] == ver:
            self.hits += 1
            return hit[1]
        self.misses += 1
        val = fn()
        self._cache[key] = (ver, val)
        if name in AGENT_READS:
            self._agent_keys.add(key)
            self._agent_pos.pop(key, None)
        return val

    # -- heartbeats patch the cached agents answers ----------------------------------
    def _sync_agents(self) -> None:
        """Bring the agents answers current at the last sync up to now when only heartbeat columns were written."""
        c = self.changes()
        now = (c.get("agents"), c.get("agents:other"))
        base, self._agents_base = self._agents_base, now
        if now == base:
            return
        with self._lock:
            rows = self._db.execute("SELECT a.id, a.heartbeat_at, a.progress_at FROM temp.beaten b "
                                    "JOIN agents a ON a.id = b.id").fetchall()
            self._db.execute("DELETE FROM temp.beaten")
        if now[1] != base[1]:
            return  # something else changed too: the answers went stale, as any write makes them
        got = {r[0]: (r[1], r[2]) for r in rows}
        made: dict[int, tuple[Any, Any]] = {}  # id() of a cached record -> (it, its patched copy)
        for key in self._agent_keys:
            ver, val = self._cache[key]
            if ver != base[:1]:
                continue  # stale before: stays stale
            pos = self._agent_pos.get(key)
            if pos is None:
                pos = self._agent_pos[key] = {a.id: i for i, a in enumerate(val)}
            out = None
            for id_, hb in got.items():
                i = pos.get(id_)
                if i is None:
                    continue
                a = val[i]
                if hb[0] == a.heartbeat_at and hb[1] == a.progress_at:
                    continue
                if out is None:
                    out = list(val)
                m = made.get(id(a))
                if m is None:
                    m = made[id(a)] = (a, _beaten(a, hb))
                out[i] = m[1]
            self._cache[key] = (now[:1], val if out is None else out)

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


def _beaten(a: Agent, hb: tuple[float, float]) -> Agent:
    """`dataclasses.replace(a, heartbeat_at=..., progress_at=...)` without running the constructor again (a tenth
    of the time; heartbeats patch thousands of records a simulated day)."""
    new = object.__new__(Agent)
    new.__dict__.update(a.__dict__, heartbeat_at=hb[0], progress_at=hb[1])
    return new
