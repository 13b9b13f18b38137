"""Riding out the database (issue 33): a PostgreSQL restart (`pg_ctl restart -m fast`), a server stopped for a
while, SQLite locked. Real parts: a PostgreSQL cluster of this module's own (it is restarted and stopped, so it is
never the session's shared one), real `healer up` processes, real SQLite files held by another connection."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from healer import lifecycle
from healer.errors import StoreUnavailable
from healer.store import open_url, outage
from tests.conftest import make_repo, wait_until
from tests.store.conftest import _start_cluster, fresh_schema

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "chaos" / "agents" / "fleet_agent.py"


@pytest.fixture(scope="module")
def restartable_pg():
    """A throwaway cluster in a tmp folder that tests may restart and stop; stopped and removed at the end."""
    cluster = _start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_fleet(restartable_pg):
    with fresh_schema(restartable_pg.url) as url:
        yield url


def test_backoff_is_capped_and_jittered():
    assert outage.backoff(1, 0.0) == pytest.approx(outage.BACKOFF_BASE / 2)
    assert outage.backoff(1, 0.999) < outage.BACKOFF_BASE
    steps = [outage.backoff(n, 0.999) for n in range(1, 40)]
    assert steps == sorted(steps) and max(steps) <= outage.BACKOFF_CAP
    assert outage.backoff(40, 0.0) == pytest.approx(outage.BACKOFF_CAP / 2)


def test_what_counts_as_the_store_being_away():
    assert outage.unavailable(StoreUnavailable("x"))
    assert outage.unavailable(sqlite3.OperationalError("database is locked"))
    assert outage.unavailable(sqlite3.OperationalError("disk I/O error"))
    assert not outage.unavailable(sqlite3.DatabaseError("database disk image is malformed"))
    assert not outage.unavailable(sqlite3.OperationalError("no such table: tickets"))
    assert not outage.unavailable(ValueError("x"))


def test_an_sqlite_store_that_takes_no_writes_is_away_like_a_read_only_postgresql(tmp_path):
    """SQLITE_READONLY, as SQLite itself raises it (a connection told to take no writes stands for a file whose
    permissions changed under a daemon): ridden out and counted like PostgreSQL's read-only transaction, never an
    internal error charged to whoever was writing."""
    db = sqlite3.connect(tmp_path / "s.db")
    db.execute("CREATE TABLE t (x)")
    db.execute("PRAGMA query_only = 1")
    with pytest.raises(sqlite3.OperationalError) as got:
        db.execute("INSERT INTO t VALUES (1)")
    db.close()
    assert outage.unavailable(got.value), got.value


def test_a_store_rides_out_a_fast_restart_and_records_the_outage_once(restartable_pg, pg_fleet, tmp_path):
    store = open_url(pg_fleet, root=tmp_path)
    try:
        store.add_ticket("before", id="T-1")
        restartable_pg.restart("fast")
        # the connection was ended by the restart: a read reconnects on the spot; a write fails at most once
        assert store.ticket("T-1").title == "before"
        try:
            store.add_ticket("after", id="T-2")
        except StoreUnavailable:
            outage.failed(store, StoreUnavailable("restart"))
            wait_until(lambda: outage.tracker(store).may_try(store.clock.monotonic()), 10, "the backoff to pass")
            store.add_ticket("after", id="T-2")
        # the outage (if a call saw one) ends with one pair of events; a second ok() records nothing more
        seen = outage.tracker(store).down
        secs = outage.ok(store, who="test")
        assert (secs is not None) == seen
        assert outage.ok(store) is None
        pairs = store.events(kinds=["store.unavailable", "store.back"])
        assert len(pairs) == (2 if seen else 0)
        assert store.ticket("T-2").title == "after"
    finally:
        store.close()


def test_a_server_that_stays_away_past_the_tolerance_ends_the_daemon_with_69(restartable_pg, pg_fleet, tmp_path):
    from healer.store.outage import StoreGone

    store = open_url(pg_fleet, root=tmp_path)
    store.patience = 0.3  # how long one call waits for the server (10 s by default)
    old = outage.tolerance()
    outage.set_tolerance(1.0)
    restartable_pg.halt("fast")
    try:
        with pytest.raises(StoreUnavailable):
            store.add_ticket("x")
        t = outage.tracker(store)
        assert t.down
        wait_until(lambda: store.clock.monotonic() - t.since > 1.1 and t.may_try(store.clock.monotonic()), 20,
                   "the tolerance to pass")
        with pytest.raises(StoreGone) as e:
            store.add_ticket("x")
        assert e.value.exit_code == 69 and "store.outage_tolerance" in str(e.value)
    finally:
        outage.set_tolerance(old)
        restartable_pg.resume_server()
        wait_until(lambda: outage.tracker(store).may_try(store.clock.monotonic()), 10, "the backoff to pass")
        store.ticket  # noqa: B018 - the store object stays usable once the server is back
        outage.ok(store)
        store.close()


# -- a real `healer up` ---------------------------------------------------------------------------

def _policy(**store) -> dict:
    cmd = [sys.executable, str(AGENT), "--task", "{task_file}", "--workdir", "{workdir}", "--run-id", "{run_id}",
           "--think", "1.0"]
    return {"fleet": {"pool_size": 2, "dispatch_tick": "1s", "loop_command": cmd},
            "supervisor": {"tick": "1s", "lease_ttl": "4s"}, "loop": {"kill_grace": "1s"},
            "store": store or {"outage_tolerance": "2m"},
            "notify": {"notifiers": [{"kind": "jsonl", "path": ".healer/notes.jsonl"}]}}


def _up(root: Path, url: str) -> subprocess.Popen:
    env = {**os.environ, "HEALER_STORE_URL": url, "HEALER_HOST_ID": root.name}
    log = open(root / ".healer" / "up.log", "ab")  # noqa: SIM115 - closed with the process by the OS
    return subprocess.Popen([sys.executable, "-m", "healer", "up", "--root", str(root)], env=env, stdout=log,
                            stderr=subprocess.STDOUT)


def _stop(p: subprocess.Popen) -> int:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        return p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
        return p.wait()


# immediate: no shutdown checkpoint, the server's crash recovery at start (a campaign: it adds a minute and a half)
@pytest.mark.parametrize("mode", ["fast", pytest.param("immediate", marks=pytest.mark.campaign)])
def test_up_survives_pg_ctl_restart_twice(restartable_pg, pg_fleet, tmp_path, mode):
    root = make_repo(tmp_path / "fleet", {"README.md": "# x\n", "healer.yaml": yaml.safe_dump(_policy())})
    (root / ".healer").mkdir()
    store = open_url(pg_fleet, root=root)
    for i in range(4):
        store.add_ticket(f"ticket {i}", id=f"T-{i}", body="behaviour: success\n")
    up = _up(root, pg_fleet)
    try:
        for n in (1, 2):  # a restart while agents run, twice
            wait_until(lambda: store.agents(states=["running"]) or up.poll() is not None, 60, "an agent running")
            assert up.poll() is None, (root / ".healer" / "up.log").read_text()[-2000:]
            restartable_pg.restart(mode)
            wait_until(lambda n=n: len(store.events(kinds=["store.back"])) >= n or up.poll() is not None, 60,
                       lambda: "store.back after the restart: " + (root / ".healer" / "up.log").read_text()[-3000:])
        wait_until(lambda: all(t.state == lifecycle.DONE for t in store.tickets()) or up.poll() is not None, 120,
                   lambda: f"every ticket done: {[(t.id, t.state) for t in store.tickets()]}")
        assert up.poll() is None, (root / ".healer" / "up.log").read_text()[-2000:]
    finally:
        code = _stop(up)
    log = (root / ".healer" / "up.log").read_text()
    assert code == 0, log[-2000:]
    assert all(t.state == lifecycle.DONE for t in store.tickets())
    assert "Traceback" not in log
    # one line per outage (each of the two processes' own connections share one tracker), never one per retry
    assert 2 <= log.count("store unavailable (") <= 2 * 2, log
    assert len(store.events(kinds=["store.unavailable"])) == len(store.events(kinds=["store.back"])) >= 2
    assert not store.events(kinds=["ticket.escalated"]) and not [t for t in store.tickets() if t.state == "needs_human"]
    store.close()


# -- two hosts, one PostgreSQL board, the server restarted under them -----------------------------

def _two_hosts_through_restarts(restartable_pg, url: str, tmp_path: Path, tickets: int, restarts: int) -> None:
    """Two real `healer up` (one board, one shared repository) while `pg_ctl restart -m fast` runs `restarts`
    times: no `up` exits, every ticket done with its work on the shared main once, no escalation, no page."""
    from collections import Counter

    from tests.conftest import git
    from tests.store import test_multihost_up as mh

    bare, roots = mh._hosts(tmp_path)
    store = open_url(url, root=roots[0])
    for i in range(tickets):
        store.add_ticket(f"ticket {i}", id=f"T-{i}", body="behaviour: success\n")
    procs = {r.name: mh._up(r, url) for r in roots}

    def logs() -> str:
        return "\n".join(f"--- {r.name}\n" + (r / ".healer" / "up.log").read_text()[-2500:] for r in roots)

    def done() -> int:
        return sum(t.state == lifecycle.DONE for t in store.tickets())

    try:
        for n in range(1, restarts + 1):  # spread over the run: after each share of the tickets is done
            wait_until(lambda n=n: done() >= tickets * n // (restarts + 1) or any(p.poll() is not None for p in procs.values()),
                       240, lambda n=n: f"progress before restart {n}: {done()} done")
            assert all(p.poll() is None for p in procs.values()), logs()
            restartable_pg.restart("fast")
        wait_until(lambda: done() == tickets or any(p.poll() is not None for p in procs.values()), 300,
                   lambda: f"every ticket done: {Counter(t.state for t in store.tickets())}\n{logs()}")
        assert all(p.poll() is None for p in procs.values()), "a healer up exited:\n" + logs()
    finally:
        codes = {name: _stop(p) for name, p in procs.items()}
        mh._kill_leftovers(roots)
    assert codes == dict.fromkeys(procs, 0), logs()
    text = logs()
    assert "Traceback" not in text
    log = git(bare, "log", "main", "--format=%B%x00")
    trailers = Counter(line.split(": ", 1)[1] for line in log.splitlines() if line.startswith("Healer-Ticket: "))
    assert trailers == Counter({f"T-{i}": 1 for i in range(tickets)})
    files = git(bare, "ls-tree", "-r", "--name-only", "main").splitlines()
    assert all(any(f.startswith(f"work/T-{i}-") for f in files) for i in range(tickets))
    # no escalation (no ticket ever moved to needs_human), no page
    assert not store.events(kinds=["ticket.moved"], contains='"to":"needs_human"')
    notes = [r / ".healer" / "notes.jsonl" for r in roots]
    pages = [ln for f in notes if f.exists() for ln in f.read_text().splitlines() if ln.strip()]
    assert not pages, pages
    ups, backs = store.events(kinds=["store.unavailable"]), store.events(kinds=["store.back"])
    assert len(ups) == len(backs) and len(backs) >= restarts, (len(ups), len(backs))
    store.close()


@pytest.mark.long  # 16 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_two_hosts_ride_out_a_pg_ctl_restart(restartable_pg, pg_fleet, tmp_path):
    _two_hosts_through_restarts(restartable_pg, pg_fleet, tmp_path, tickets=4, restarts=1)


@pytest.mark.campaign
@pytest.mark.timeout(1800)
def test_two_hosts_40_tickets_three_restarts(restartable_pg, pg_fleet, tmp_path):
    _two_hosts_through_restarts(restartable_pg, pg_fleet, tmp_path, tickets=40, restarts=3)


def test_sqlite_locked_is_an_outage_ridden_out_with_one_line_and_a_pair_of_events(tmp_path):
    """Another process holds the SQLite store's write lock past the busy timeout: the pass fails as an outage
    (one line however many passes fail), and the first pass after the lock is gone records the pair."""
    from loguru import logger

    from healer.fleet.failed_pass import report_failed_pass
    from healer.store import SqliteStore

    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    db = tmp_path / ".healer" / "healer.db"
    db.parent.mkdir()
    store = SqliteStore(db, root=tmp_path)
    store._db.execute("PRAGMA busy_timeout=20")  # the real store waits 30 s and retries: the test need not
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys\n"
        f"c = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
        "c.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "sys.stdin.readline()\n")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        errors = []
        for _ in range(3):  # three passes fail on the lock
            try:
                store._db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:
                errors.append(e)
                report_failed_pass(store, "dispatch", e)
        assert len(errors) == 3 and all(outage.unavailable(e) for e in errors)
    finally:
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(30)
    assert outage.ok(store, who="test") is not None
    assert [e.kind for e in store.events(prefix="store.")] == ["store.unavailable", "store.back"]
    assert not store.events(kinds=["dispatch.error"]), "an outage is not a failed pass"
    logger.remove(sink)
    assert sum("store unavailable (database is locked)" in ln for ln in lines) == 1, lines
    assert sum("store back after" in ln for ln in lines) == 1, lines
    store.close()


def test_fenced_writes_stay_fenced_across_a_reconnect(restartable_pg, pg_fleet, tmp_path):
    """A holder whose lease expired while the server restarted, and was taken over, has its next write refused
    on the new connection: the token is checked in every write transaction, not remembered with a connection."""
    from healer.errors import StaleLease

    a, b = open_url(pg_fleet, root=tmp_path), open_url(pg_fleet, root=tmp_path)
    try:
        lease = a.acquire_lease("supervisor", "a", 1, "host-a", 1.0)
        a.hold(lease)
        a.append("work", "a", {"token": lease.token})
        restartable_pg.restart("fast")
        wait_until(lambda: b.acquire_lease("supervisor", "b", 2, "host-b", 30.0), 30, "b taking the expired lease over")
        with pytest.raises(StaleLease):
            a.append("work", "a", {"token": lease.token})
        refused = b.events(kinds=["lease.stale_write_refused"])
        assert [e.payload["token"] for e in refused] == [lease.token]
        assert len(b.events(kinds=["work"])) == 1
        # and re-acquired, never assumed: the old holder gets it back only as a new grant (a new token) once free
        assert a.acquire_lease("supervisor", "a", 1, "host-a", 1.0) is None
    finally:
        a.close()
        b.close()


@pytest.mark.long  # 27 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_up_past_the_tolerance_ends_with_one_line_and_69(restartable_pg, pg_fleet, tmp_path):
    root = make_repo(tmp_path / "fleet", {"README.md": "# x\n", "healer.yaml": yaml.safe_dump(
        _policy(outage_tolerance="3s"))})
    (root / ".healer").mkdir()
    store = open_url(pg_fleet, root=root)
    store.close()
    up = _up(root, pg_fleet)
    log = root / ".healer" / "up.log"
    try:
        wait_until(lambda: "dispatcher and supervisor running" in log.read_text() or up.poll() is not None, 60, "up running")
        restartable_pg.halt("fast")
        try:
            code = up.wait(120)
        finally:
            restartable_pg.resume_server()
    finally:
        _stop(up)
    text = log.read_text()
    assert code == 69, text[-2000:]
    assert "Traceback" not in text
    assert text.count("store unavailable (") == 1, text[-2000:]
    last = [ln for ln in text.splitlines() if ln.strip()][-1]
    assert last.startswith("healer: up: ") and "store.outage_tolerance (3s)" in last, last


# -- a daemon started while the store is away (issue 33) ---------------------------------------------

def _fleet(tmp_path: Path, url: str, **store) -> Path:
    root = make_repo(tmp_path / "fleet", {"README.md": "# x\n", "healer.yaml": yaml.safe_dump(_policy(**store))})
    (root / ".healer").mkdir()
    open_url(url, root=root).close()
    return root


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_up_started_while_the_server_is_down_waits_for_it(restartable_pg, pg_fleet, tmp_path):
    """`healer up` started while PostgreSQL is stopped rides it out as an outage met later: one line, no exit, and
    once the server is back it runs, with the outage's store.unavailable / store.back pair in the journal."""
    root = _fleet(tmp_path, pg_fleet)
    log = root / ".healer" / "up.log"
    restartable_pg.halt("fast")
    try:
        up = _up(root, pg_fleet)
        wait_until(lambda: "store unavailable (" in log.read_text() or up.poll() is not None, 60, "up to meet the outage")
        assert up.poll() is None, log.read_text()[-2000:]
    finally:
        restartable_pg.resume_server()
    try:
        wait_until(lambda: "dispatcher and supervisor running" in log.read_text() or up.poll() is not None, 60, "up running")
        assert up.poll() is None, log.read_text()[-2000:]
    finally:
        code = _stop(up)
    text = log.read_text()
    assert code == 0, text[-2000:]
    assert "Traceback" not in text
    assert text.count("store unavailable (") == 1 and text.count("store back after") == 1, text[-2000:]
    store = open_url(pg_fleet, root=root)
    try:
        ev = store.events(prefix="store.")
        assert [e.kind for e in ev][:2] == ["store.unavailable", "store.back"] and ev[1].payload["who"] == "up"
    finally:
        store.close()


@pytest.mark.long  # 20 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@pytest.mark.parametrize("cmd", ["up", "dispatch", "supervise"])
def test_a_daemon_started_while_the_server_stays_down_ends_with_one_line_and_69(restartable_pg, pg_fleet, tmp_path, cmd):
    root = _fleet(tmp_path, pg_fleet, outage_tolerance="2s")
    restartable_pg.halt("fast")
    try:
        env = {**os.environ, "HEALER_STORE_URL": pg_fleet, "HEALER_HOST_ID": root.name}
        r = subprocess.run([sys.executable, "-m", "healer", cmd, "--root", str(root)], env=env, capture_output=True,
                           text=True, timeout=120)
    finally:
        restartable_pg.resume_server()
    text = r.stdout + r.stderr
    assert r.returncode == 69, text[-2000:]
    assert "Traceback" not in text
    assert text.count("store unavailable (") == 1, text
    last = [ln for ln in text.splitlines() if ln.strip()][-1]
    assert last.startswith("healer: ") and "store.outage_tolerance (2s)" in last, last


@pytest.mark.long  # 9 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_up_started_while_sqlite_is_locked_waits_for_it(tmp_path):
    """SQLite's equivalent: another process holds the store in exclusive locking mode when `up` starts. `up` says
    so in one line after a busy timeout, waits, and runs once the lock is gone, the pair of events recorded."""
    root = make_repo(tmp_path / "fleet", {"README.md": "# x\n", "healer.yaml": yaml.safe_dump(_policy())})
    env = {k: v for k, v in os.environ.items() if k != "HEALER_STORE_URL"}
    assert subprocess.run([sys.executable, "-m", "healer", "init", "--root", str(root)], env=env,
                          capture_output=True, timeout=120).returncode == 0
    db = root / ".healer" / "healer.db"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys\n"
        f"c = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
        "c.execute('PRAGMA locking_mode=EXCLUSIVE')\n"
        "c.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "sys.stdin.readline()\n"
        "c.execute('ROLLBACK')\n")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    log = root / ".healer" / "up.log"
    up = None
    try:
        assert holder.stdout.readline().strip() == "locked"
        with open(log, "ab") as out:
            up = subprocess.Popen([sys.executable, "-m", "healer", "up", "--root", str(root)], env=env, stdout=out,
                                  stderr=subprocess.STDOUT)
        wait_until(lambda: "store unavailable (" in log.read_text() or up.poll() is not None, 120, "up to meet the lock")
        assert up.poll() is None, log.read_text()[-2000:]
    finally:
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(30)
    try:
        wait_until(lambda: "dispatcher and supervisor running" in log.read_text() or up.poll() is not None, 120, "up running")
        assert up.poll() is None, log.read_text()[-2000:]
    finally:
        code = _stop(up)
    text = log.read_text()
    assert code == 0 and "Traceback" not in text, text[-2000:]
    assert text.count("store unavailable (database is locked)") == 1, text[-2000:]
    store = open_url(f"sqlite:{db}", root=root)
    try:
        assert [e.kind for e in store.events(prefix="store.")][:2] == ["store.unavailable", "store.back"]
    finally:
        store.close()


@pytest.mark.long  # 14 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@pytest.mark.parametrize("cmd", ["up", "supervise", "dispatch"])
def test_a_sigterm_while_the_store_is_awaited_stops_the_daemon_cleanly(restartable_pg, pg_fleet, tmp_path, cmd):
    root = _fleet(tmp_path, pg_fleet)
    log = root / ".healer" / f"{cmd}.out"
    restartable_pg.halt("fast")
    try:
        env = {**os.environ, "HEALER_STORE_URL": pg_fleet, "HEALER_HOST_ID": root.name}
        with open(log, "wb") as out:
            p = subprocess.Popen([sys.executable, "-m", "healer", cmd, "--root", str(root)], env=env, stdout=out,
                                 stderr=subprocess.STDOUT)
        wait_until(lambda: "store unavailable (" in log.read_text() or p.poll() is not None, 60, "the outage's line")
        code = _stop(p)
    finally:
        restartable_pg.resume_server()
    text = log.read_text()
    assert code == 0 and "Traceback" not in text, text
    assert "stopped before the store came back" in text, text


@pytest.mark.campaign  # about a minute: one busy timeout (30 s) per try
def test_a_sqlite_store_locked_mid_run_counts_against_the_tolerance(tmp_path):
    """Another process holds the SQLite store's write lock while `up` runs: the write that meets the lock gives up
    after one busy timeout, not fifty (it used to wait some 25 minutes inside the store), the outage is said in one
    line, and past store.outage_tolerance `up` ends with one line and exit 69."""
    root = make_repo(tmp_path / "fleet", {"README.md": "# x\n",
                                          "healer.yaml": yaml.safe_dump(_policy(outage_tolerance="10s"))})
    env = {k: v for k, v in os.environ.items() if k != "HEALER_STORE_URL"}
    assert subprocess.run([sys.executable, "-m", "healer", "init", "--root", str(root)], env=env,
                          capture_output=True, timeout=120).returncode == 0
    log = root / ".healer" / "up.log"
    with open(log, "ab") as out:
        up = subprocess.Popen([sys.executable, "-m", "healer", "up", "--root", str(root)], env=env, stdout=out,
                              stderr=subprocess.STDOUT)
    holder = None
    try:
        wait_until(lambda: "dispatcher and supervisor running" in log.read_text() or up.poll() is not None, 120, "up running")
        holder = subprocess.Popen([sys.executable, "-c", (
            "import sqlite3, sys\n"
            f"c = sqlite3.connect({str(root / '.healer' / 'healer.db')!r}, isolation_level=None, timeout=60)\n"
            "c.execute('BEGIN IMMEDIATE')\n"  # the write lock, held: a writer stopped mid-transaction
            "print('locked', flush=True)\n"
            "sys.stdin.readline()\n")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "locked"
        code = up.wait(240)
    finally:
        _stop(up)
        if holder is not None:
            holder.stdin.close()
            holder.wait(30)
    text = log.read_text()
    assert code == 69 and "Traceback" not in text, text[-2000:]
    assert text.count("store unavailable (database is locked)") == 1, text[-2000:]
