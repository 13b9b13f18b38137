"""Forward-only schema migrations. Version N is `SCHEMA[N-1]`; never edit a shipped one, append.

Every backend runs the same list, written once in the SQL both speak. The only words they spell
differently are the column types, left as slots filled per dialect: `$ID` (an id the database hands
out), `$INT` (64-bit on both), `$REAL` (a double: timestamps). `MIGRATIONS` is SQLite's text (the
same bytes as before the slots), `PG_MIGRATIONS` PostgreSQL's. tests/store/ checks both schemas come
out alike; tests/spine/test_sql_in_adapters.py that the texts stay what they were."""

from __future__ import annotations

from string import Template

V1 = """
CREATE TABLE tickets (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    body TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL,
    priority $INT NOT NULL DEFAULT 2,
    blocked_by TEXT NOT NULL DEFAULT '[]',
    created_at $REAL NOT NULL,
    updated_at $REAL NOT NULL
);
CREATE TABLE labels (
    ticket_id TEXT NOT NULL,
    label TEXT NOT NULL,
    added_at $REAL NOT NULL,
    PRIMARY KEY (ticket_id, label)
);
CREATE TABLE comments (
    id $ID,
    ticket_id TEXT NOT NULL,
    at $REAL NOT NULL,
    author TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE agents (
    id TEXT PRIMARY KEY,
    ticket_id TEXT,
    state TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'process',
    pid $INT,
    host TEXT NOT NULL DEFAULT '',
    container TEXT,
    run_id TEXT,
    worktree TEXT,
    started_at $REAL NOT NULL,
    heartbeat_at $REAL NOT NULL,
    progress_at $REAL NOT NULL,
    ended_at $REAL,
    exit_code $INT
);
CREATE TABLE worktrees (
    path TEXT PRIMARY KEY,
    ticket_id TEXT,
    branch TEXT NOT NULL,
    created_at $REAL NOT NULL,
    state TEXT NOT NULL DEFAULT 'active',
    removed_at $REAL
);
CREATE TABLE proposals (
    id $ID,
    ticket_id TEXT NOT NULL,
    branch TEXT NOT NULL,
    "commit" TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at $REAL NOT NULL,
    decided_at $REAL,
    gate_log TEXT NOT NULL DEFAULT ''
);
CREATE TABLE intents (
    id $ID,
    action TEXT NOT NULL,
    subject TEXT NOT NULL,
    state TEXT NOT NULL,
    params TEXT NOT NULL DEFAULT '{}',
    actor TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    created_at $REAL NOT NULL,
    updated_at $REAL NOT NULL,
    result TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    pid $INT NOT NULL,
    host TEXT NOT NULL,
    acquired_at $REAL NOT NULL,
    expires_at $REAL NOT NULL
);
CREATE TABLE cooldowns (
    key TEXT PRIMARY KEY,
    last_at $REAL NOT NULL,
    suppressed $INT NOT NULL DEFAULT 0
);
CREATE TABLE events (
    id $ID,
    at $REAL NOT NULL,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL DEFAULT '',
    payload TEXT NOT NULL DEFAULT '{}'
);
"""

# v2: launch attempts (retry evidence), fleet settings, extensible data columns, event indexes
V2 = """
CREATE TABLE attempts (
    id $ID,
    ticket_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    at $REAL NOT NULL,
    run_id TEXT,
    ended_at $REAL,
    exit_code $INT,
    failure_signature TEXT,
    state_hash TEXT,
    head TEXT,
    gate_log_tail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX attempts_ticket ON attempts(ticket_id, id);
CREATE TABLE settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
ALTER TABLE tickets ADD COLUMN data TEXT NOT NULL DEFAULT '{}';
ALTER TABLE agents ADD COLUMN data TEXT NOT NULL DEFAULT '{}';
CREATE INDEX events_kind ON events(kind, id);
CREATE INDEX events_subject ON events(subject, id);
CREATE INDEX tickets_state ON tickets(state);
CREATE INDEX agents_ticket ON agents(ticket_id, state);
CREATE INDEX intents_state ON intents(state);
"""

# v3: the notification outbox (issue 15): one row per (notification, remote notifier), delivered by a
# worker with backoff until delivered or expired; `idem` is the idempotency key receivers de-duplicate on
V3 = """
CREATE TABLE outbox (
    id $ID,
    key TEXT NOT NULL,
    notifier TEXT NOT NULL,
    idem TEXT NOT NULL,
    payload TEXT NOT NULL DEFAULT '{}',
    state TEXT NOT NULL,
    created_at $REAL NOT NULL,
    next_at $REAL NOT NULL,
    expires_at $REAL NOT NULL,
    tries $INT NOT NULL DEFAULT 0,
    last_error TEXT NOT NULL DEFAULT '',
    claimed_by TEXT,
    claim_until $REAL,
    delivered_at $REAL
);
CREATE INDEX outbox_due ON outbox(state, next_at);
CREATE INDEX outbox_key ON outbox(key, state)
"""

# v4: fencing tokens (multi-host): each lease name keeps a token that only grows, bumped at every new holder
V4 = """
ALTER TABLE leases ADD COLUMN token $INT NOT NULL DEFAULT 0;
CREATE TABLE lease_tokens (
    name TEXT PRIMARY KEY,
    token $INT NOT NULL
);
"""

# v5: adopted agent loops (issue 44, docs/adopt.md): loops healer did not launch, found by the policy's `adopt:` rules.
# Their own table, not `agents`: nothing that launches, reaps, resumes or sweeps healer's own agents may ever see them.
# (pid, start_ticks) is the identity every signal is checked against (start_ticks: /proc/PID/stat field 22).
V5 = """
CREATE TABLE adopted (
    id TEXT PRIMARY KEY,
    rule TEXT NOT NULL,
    host TEXT NOT NULL,
    pid $INT NOT NULL,
    pgid $INT NOT NULL,
    start_ticks $INT NOT NULL,
    started_at $REAL NOT NULL,
    cwd TEXT NOT NULL,
    worktree TEXT NOT NULL,
    cli TEXT NOT NULL,
    session_id TEXT,
    state TEXT NOT NULL,
    adopted_at $REAL NOT NULL,
    ended_at $REAL,
    data TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX adopted_state ON adopted(state, host)
"""

SCHEMA: list[str] = [V1, V2, V3, V4, V5]
CURRENT = len(SCHEMA)

SQLITE_TYPES = {"ID": "INTEGER PRIMARY KEY AUTOINCREMENT", "INT": "INTEGER", "REAL": "REAL"}
POSTGRES_TYPES = {"ID": "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", "INT": "BIGINT", "REAL": "DOUBLE PRECISION"}


def migrations(types: dict[str, str]) -> list[str]:
    """The schema's steps in one dialect's types."""
    return [Template(m).substitute(types) for m in SCHEMA]


MIGRATIONS: list[str] = migrations(SQLITE_TYPES)
PG_MIGRATIONS: list[str] = migrations(POSTGRES_TYPES)
