"""The CLI as a user runs it: real child processes, real signals, real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from healer import quarantine as q
from healer.store import open_store
from tests.conftest import REPO, healer, make_repo, wait_until

PY = sys.executable
OLD = 6 * 3600


def _fleet(tmp_path: Path, policy: str = "") -> Path:
    root = make_repo(tmp_path / "fleet")
    assert healer("init", "--root", str(root)).returncode == 0
    if policy:
        (root / "healer.yaml").write_text(policy)
    return root


def _frozen(root: Path) -> None:
    s = open_store(root)
    s.add_ticket("frozen", id="T-1")
    s.move_ticket("T-1", "in_progress", actor="dispatch")
    with s.tx() as db:
        db.execute("UPDATE tickets SET updated_at = updated_at - ?", (OLD,))
    s.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([PY, "-m", "healer", *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_supervise_once_then_journal(tmp_path):
    root = _fleet(tmp_path)
    _frozen(root)
    r = healer("supervise", "--once", "--json", "--root", str(root))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["outcomes"] == {"done": 1}
    j = healer("journal", "--kind", "remedy.", "--json", "--root", str(root))
    assert j.returncode == 0, j.stderr
    evs = [json.loads(line) for line in j.stdout.splitlines()]
    assert [(e["kind"], e["subject"], e["payload"]["action"]) for e in evs] == [("remedy.done", "T-1", "requeue_ticket")]
    human = healer("journal", "--root", str(root), "-n", "5")
    assert human.returncode == 0 and "remedy.done" in human.stdout and "supervisor.tick" not in human.stdout
    ticks = healer("journal", "--root", str(root), "-n", "5", "--ticks")  # the ticks, when asked
    assert ticks.returncode == 0 and "supervisor.tick" in ticks.stdout


def test_journal_follow_prints_new_events(tmp_path):
    root = _fleet(tmp_path)
    import queue
    import threading

    p = _spawn("journal", "--follow", "--json", "-n", "0", "--kind", "probe.", "--root", str(root))
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in p.stdout], daemon=True).start()
    s = open_store(root)
    try:
        # the follower may start after an event: keep appending until one shows up (never block on the pipe)
        def seen():
            s.append("probe.one", "x", {"n": 1})
            try:
                return lines.get(timeout=0.5)
            except queue.Empty:
                return None

        line = wait_until(seen, 60, "a followed event")
        assert json.loads(line)["kind"] == "probe.one"
        p.terminate()
        assert p.wait(timeout=10) == 0  # SIGTERM ends a follow cleanly, like Ctrl-C (was 143)
    finally:
        s.close()
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_quarantine_list_and_restore_cli(tmp_path):
    root = _fleet(tmp_path)
    f = root / "stray" / "blob.bin"
    f.parent.mkdir()
    f.write_bytes(os.urandom(10_000))
    sha = q.sha256_of(f)
    e = q.quarantine(root, "stray/blob.bin", "test")
    r = healer("quarantine", "list", "--json", "--root", str(root))
    assert r.returncode == 0, r.stderr
    [row] = json.loads(r.stdout)
    assert row["path"] == "stray/blob.bin" and row["sha256"] == sha and row["size"] == 10_000
    f.write_text("someone put a new file here")
    clash = healer("quarantine", "restore", e.id, "--root", str(root))
    assert clash.returncode == 64 and "refusing to overwrite" in clash.stderr and len(clash.stderr.strip().splitlines()) == 1
    f.unlink()
    ok = healer("quarantine", "restore", "stray/blob.bin", "--root", str(root))
    assert ok.returncode == 0, ok.stderr
    assert q.sha256_of(f) == sha
    again = healer("quarantine", "restore", "stray/blob.bin", "--root", str(root))
    assert again.returncode == 64 and "Traceback" not in again.stderr
    assert healer("quarantine", "list", "--root", str(root)).stdout.strip() == "quarantine is empty"


def test_restoring_an_altered_or_missing_quarantined_copy_is_exit_65_and_touches_nothing(tmp_path):
    root = _fleet(tmp_path)
    (root / "note.txt").write_text("mine\n")
    e = q.quarantine(root, "note.txt", "test")
    copy = root / ".healer" / "quarantine" / e.batch / e.stored
    copy.write_text("altered\n")
    r = healer("quarantine", "restore", e.id, "--root", str(root))
    assert r.returncode == 65, r.stderr
    assert r.stderr.startswith(f"healer: {e.id}: the quarantined copy's sha256 ") and len(r.stderr.splitlines()) == 1
    assert not (root / "note.txt").exists() and copy.read_text() == "altered\n"
    copy.unlink()
    r = healer("quarantine", "restore", e.id, "--root", str(root))
    assert r.returncode == 65 and "the quarantined copy is missing" in r.stderr, r.stderr


def _sigterm_leaves_no_lease(p: subprocess.Popen, root: Path, *leases: str) -> None:
    """SIGTERM a daemon: it must exit 0 and release its leases (a corpse lease blocks the next holder)."""
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=40) == 0, p.stderr.read()[-3000:]
    s = open_store(root)
    try:
        assert [s.lease(n) for n in leases] == [None] * len(leases)
    finally:
        s.close()


@contextmanager
def _daemon(*args: str):
    p = _spawn(*args)
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def _metrics(port: int) -> str | None:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_supervise_daemon_serves_metrics_and_stops_cleanly_on_sigterm(tmp_path):
    root = _fleet(tmp_path, "supervisor:\n  tick: 1s\n")
    _frozen(root)
    port = _free_port()
    with _daemon("supervise", "--metrics-port", str(port), "--root", str(root)) as p:
        def ticks():
            body = _metrics(port) or ""
            line = [x for x in body.splitlines() if x.startswith("healer_ticks_total ")]
            return body if line and float(line[0].split()[1]) >= 2 else None

        body = wait_until(ticks, 60, "two ticks on the metrics endpoint")
        assert 'healer_actions_total{action="requeue_ticket",outcome="done"} 1' in body
        _sigterm_leaves_no_lease(p, root, "supervisor")
    s = open_store(root)
    try:
        assert s.ticket("T-1").state == "queued"
    finally:
        s.close()
    assert (root / ".healer" / "logs" / "supervisor.jsonl").exists()


def test_supervise_sigterm_as_soon_as_metrics_answer_is_a_clean_stop(tmp_path):
    # regression: the metrics port answered before the SIGTERM handler was installed: exit 143, lease kept
    root = _fleet(tmp_path)
    port = _free_port()
    with _daemon("supervise", "--metrics-port", str(port), "--root", str(root)) as p:
        wait_until(lambda: _metrics(port) is not None, 60, "the metrics endpoint")
        _sigterm_leaves_no_lease(p, root, "supervisor")


def test_up_runs_dispatcher_and_supervisor_and_stops_on_sigterm(tmp_path):
    root = _fleet(tmp_path, "supervisor:\n  tick: 1s\nfleet:\n  dispatch_tick: 1s\n"
                            "loop:\n  agent: {command: [python3, -c, pass]}\n  gates: [{name: ok, run: [python3, -c, pass]}]\n")
    with _daemon("up", "--root", str(root)) as p:
        def both_ticked():
            s = open_store(root)
            try:
                return s.count_events("supervisor.tick") >= 1 and s.get_setting("dispatch.last_tick_at") is not None
            finally:
                s.close()

        wait_until(both_ticked, 60, "a dispatcher tick and a supervisor tick")
        _sigterm_leaves_no_lease(p, root, "supervisor", "dispatcher")


def test_usage_errors_are_one_line(tmp_path):
    r = healer("supervise", "--once", "--root", str(tmp_path))
    assert r.returncode == 64 and len(r.stderr.strip().splitlines()) == 1 and "not a healer fleet" in r.stderr


def test_a_board_command_is_one_attempt_not_two(tmp_path):
    # regression: each board command counted twice (its store event and its human.action), so
    # `board add` + `board move` made 3 attempts and the first tick escalated (escalate_after 3)
    # a ticket nobody had tried to fix instead of requeueing it
    root = _fleet(tmp_path, "version: 1\nhealth: {frozen_in_progress: 1s}\nremediation: {quiet_period: 1s}\n")
    assert healer("board", "add", "frozen", "--root", str(root)).returncode == 0
    assert healer("board", "move", "T-1", "in_progress", "--root", str(root)).returncode == 0
    from healer.remedy import limiter

    s = open_store(root)
    try:
        got = limiter.attempts(s, "T-1", 0.0)
        # the move is one attempt (not two); creating the ticket is none (it held new tickets for 4h)
        assert [a.what for a in got] == ["move"]
        assert len(limiter.recent_attempts(s, 0.0)["T-1"]) == 1
        with s.tx() as db:  # the move is old news: past the quiet period and the frozen threshold
            db.execute("UPDATE tickets SET updated_at = updated_at - 60")
            db.execute("UPDATE events SET at = at - 60")
    finally:
        s.close()
    r = healer("supervise", "--once", "--json", "--root", str(root))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["outcomes"] == {"done": 1}
    s = open_store(root)
    try:
        assert s.ticket("T-1").state == "queued"  # requeued, not escalated to needs_human
    finally:
        s.close()
