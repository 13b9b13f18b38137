"""Forward-only schema migrations. Version N is `MIGRATIONS[N-1]`; never edit a shipped one, append.

Every backend runs the same list: write it in the SQL both speak (SQLite's types; the PostgreSQL
adapter maps `INTEGER PRIMARY KEY AUTOINCREMENT`, `INTEGER` and `REAL` to its own, see
`healer/store/postgres.py`). tests/store/ checks both schemas come out alike."""

from __future__ import annotations

V1 = """
CREATE TABLE tickets (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    body TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 2,
    blocked_by TEXT NOT NULL DEFAULT '[]',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE labels (
    ticket_id TEXT NOT NULL,
    label TEXT NOT NULL,
    added_at REAL NOT NULL,
    PRIMARY KEY (ticket_id, label)
);
CREATE TABLE comments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ticket_id TEXT NOT NULL,
    at REAL NOT NULL,
    author TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE agents (
    id TEXT PRIMARY KEY,
    ticket_id TEXT,
    state TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'process',
    pid INTEGER,
    host TEXT NOT NULL DEFAULT '',
    container TEXT,
    run_id TEXT,
    worktree TEXT,
    started_at REAL NOT NULL,
    heartbeat_at REAL NOT NULL,
    progress_at REAL NOT NULL,
    ended_at REAL,
    exit_code INTEGER
);
CREATE TABLE worktrees (
    path TEXT PRIMARY KEY,
    ticket_id TEXT,
    branch TEXT NOT NULL,
    created_at REAL NOT NULL,
    state TEXT NOT NULL DEFAULT 'active',
    removed_at REAL
);
CREATE TABLE proposals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ticket_id TEXT NOT NULL,
    branch TEXT NOT NULL,
    "commit" TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at REAL NOT NULL,
    decided_at REAL,
    gate_log TEXT NOT NULL DEFAULT ''
);
CREATE TABLE intents (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    action TEXT NOT NULL,
    subject TEXT NOT NULL,
    state TEXT NOT NULL,
    params TEXT NOT NULL DEFAULT '{}',
    actor TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    result TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE TABLE cooldowns (
    key TEXT PRIMARY KEY,
    last_at REAL NOT NULL,
    suppressed INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL DEFAULT '',
    payload TEXT NOT NULL DEFAULT '{}'
);
"""

# v2: launch attempts (retry evidence), fleet settings, extensible data columns, event indexes
V2 = """
CREATE TABLE attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ticket_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    at REAL NOT NULL,
    run_id TEXT,
    ended_at REAL,
    exit_code INTEGER,
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
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    notifier TEXT NOT NULL,
    idem TEXT NOT NULL,
    payload TEXT NOT NULL DEFAULT '{}',
    state TEXT NOT NULL,
    created_at REAL NOT NULL,
    next_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    tries INTEGER NOT NULL DEFAULT 0,
    last_error TEXT NOT NULL DEFAULT '',
    claimed_by TEXT,
    claim_until REAL,
    delivered_at REAL
);
CREATE INDEX outbox_due ON outbox(state, next_at);
CREATE INDEX outbox_key ON outbox(key, state)
"""

# v4: fencing tokens (multi-host): each lease name keeps a token that only grows, bumped at every new holder
V4 = """
ALTER TABLE leases ADD COLUMN token INTEGER NOT NULL DEFAULT 0;
CREATE TABLE lease_tokens (
    name TEXT PRIMARY KEY,
    token INTEGER NOT NULL
);
"""

MIGRATIONS: list[str] = [V1, V2, V3, V4]
CURRENT = len(MIGRATIONS)
