"""The store: WAL at .healer/healer.db, concurrent appends from real processes, forward migrations."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from healer.clock import SystemClock, VirtualClock
from healer.errors import HealerError
from healer.store import db_path, open_store
from healer.store.migrations import CURRENT, MIGRATIONS
from tests.spine.conftest import REPO

WRITER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from healer.clock import system
    from healer.store import open_store
    root, who, n, go, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), sys.argv[5]
    s = open_store(root)
    clock = system()
    Path(out + ".ready").touch()
    deadline = clock.monotonic() + 30
    while not go.exists() and clock.monotonic() < deadline:  # start together
        clock.sleep(0.005)
    ids = [s.append("bench.append", who, {"i": i}) for i in range(n)]
    s.close()
    Path(out).write_text(json.dumps(ids))
""")


def test_two_processes_append_2000_events_each(tmp_path):
    root = tmp_path / "fleet"
    open_store(root).close()  # the schema exists before the race
    go = tmp_path / "go"
    procs = []
    for who in ("a", "b"):
        procs.append(subprocess.Popen([sys.executable, "-c", WRITER, str(root), who, "2000", str(go), str(tmp_path / f"{who}.json")],
                                      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    clock = SystemClock()
    deadline = clock.monotonic() + 60
    while not all((tmp_path / f"{w}.json.ready").exists() for w in ("a", "b")) and clock.monotonic() < deadline:
        clock.sleep(0.01)
    go.touch()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "locked" not in err.lower()
    ids = {who: json.loads((tmp_path / f"{who}.json").read_text()) for who in ("a", "b")}
    for who, mine in ids.items():
        assert all(x < y for x, y in zip(mine, mine[1:], strict=False)), f"{who}: ids not strictly increasing"
    s = open_store(root)
    events = s.events(kinds=["bench.append"])
    assert len(events) == 4000
    assert [e.id for e in events] == sorted({*ids["a"], *ids["b"]})
    for who in ("a", "b"):
        assert [e.payload["i"] for e in events if e.subject == who] == list(range(2000))
    assert s.count_events("bench.append", subject="a") == 2000
    switches = sum(1 for x, y in zip(events, events[1:], strict=False) if x.subject != y.subject)
    print(f"writers interleaved {switches} times")
    s.close()


def test_store_lives_in_healer_dir_in_wal_mode(tmp_path):
    s = open_store(tmp_path)
    assert db_path(tmp_path) == tmp_path / ".healer" / "healer.db"
    assert s.path == str(tmp_path / ".healer" / "healer.db")
    assert s._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert s.version() == CURRENT
    s.close()


def test_event_log_query_api(tmp_path):
    clock = VirtualClock(1000)
    s = open_store(tmp_path, clock)
    a = s.append("ticket.created", "T-1", {"x": 1})
    clock.advance(10)
    b = s.append("agent.registered", "A-1")
    c = s.append("ticket.moved", "T-1", {"to": "done"})
    assert [e.id for e in s.events()] == [a, b, c]
    assert [e.id for e in s.events(after=a)] == [b, c]
    assert [e.id for e in s.events(subject="T-1")] == [a, c]
    assert [e.id for e in s.events(prefix="ticket.")] == [a, c]
    assert [e.id for e in s.events(kinds=["agent.registered"])] == [b]
    assert [e.id for e in s.events(since=1005)] == [b, c]
    assert [e.id for e in s.tail(2)] == [b, c]
    assert s.last_event_id() == c
    assert s.events(subject="T-1")[0].payload == {"x": 1} and s.events()[0].at == 1000
    s.close()


def _v1_database(root):
    """A store as healer schema version 1 left it, with data in every kind of row."""
    path = db_path(root)
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0])
    db.execute("INSERT INTO tickets VALUES ('T-1','fix the build','body text','queued',1,'[\"T-0\"]',100.0,100.0)")
    db.execute("INSERT INTO labels VALUES ('T-1','to-review',101.0)")
    db.execute("INSERT INTO comments(ticket_id, at, author, body) VALUES ('T-1',102.0,'human','looks stuck')")
    db.execute("INSERT INTO events(at, kind, subject, payload) VALUES (100.0,'ticket.created','T-1','{\"title\":\"fix the build\"}')")
    db.execute("INSERT INTO agents(id, ticket_id, state, started_at, heartbeat_at, progress_at) VALUES ('A-1','T-1','running',1,2,3)")
    db.execute("INSERT INTO cooldowns VALUES ('alert:x', 50.0, 2)")
    db.execute("PRAGMA user_version=1")
    db.commit()
    db.close()


def test_version_1_store_opens_under_current_with_data_intact(tmp_path):
    _v1_database(tmp_path)
    s = open_store(tmp_path, VirtualClock(200))
    assert s.version() == CURRENT
    t = s.ticket("T-1")
    assert (t.title, t.body, t.state, t.priority, t.blocked_by, t.created_at) == ("fix the build", "body text", "queued", 1, ("T-0",), 100.0)
    assert t.labels == {"to-review": 101.0} and t.data == {}
    assert [c.body for c in s.comments("T-1")] == ["looks stuck"]
    assert [(e.kind, e.payload) for e in s.events()] == [("ticket.created", {"title": "fix the build"})]
    assert s.agent("A-1").state == "running" and s.agent("A-1").data == {}
    assert s.cooldowns() == {"alert:x": (50.0, 2)}
    # the new version's tables work on the migrated store
    s.set_setting("k", {"v": 1})
    assert s.get_setting("k") == {"v": 1}
    s.add_attempt("T-1", "launch")
    assert len(s.attempts("T-1")) == 1
    new = s.append("after.migration", "T-1")
    assert new > s.events()[0].id
    s.close()
    again = open_store(tmp_path)  # reopening does not migrate twice
    assert again.version() == CURRENT and again.ticket("T-1").title == "fix the build"
    again.close()


def test_newer_store_is_refused_with_a_clear_error(tmp_path):
    open_store(tmp_path).close()
    db = sqlite3.connect(db_path(tmp_path))
    db.execute(f"PRAGMA user_version={CURRENT + 1}")
    db.commit()
    db.close()
    with pytest.raises(HealerError, match="newer than this healer"):
        open_store(tmp_path)


def test_system_clock_store_records_real_time(tmp_path):
    s = open_store(tmp_path, SystemClock())
    before = SystemClock().now()
    s.append("x")
    assert s.events()[0].at >= before
    s.close()
