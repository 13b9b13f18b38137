"""`healer board --watch` and `healer status --watch` (issue 43 item 3): into a pipe (no tty) a new block only when the
fleet changed, never for time passing; Ctrl-C and SIGTERM end a watch quietly with exit 0; a store lost under a
watch ends it with the line and exit code the command has without --watch; a bad --interval is a usage error (64).

Real child processes reading a real store; the tests wait on the output with a bounded deadline, never a sleep."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from healer.cli.watching import stable
from healer.fleet.status import fleet_status
from healer.policy import load_policy
from healer.records import Agent
from healer.store import open_store
from tests.conftest import REPO, healer, make_repo, wait_until

HEADER = "--- "


def _fleet(tmp_path: Path) -> Path:
    root = make_repo(tmp_path / "fleet")
    assert healer("init", "--root", str(root)).returncode == 0
    return root


class _Watch:
    def __init__(self, root: Path, *args: str) -> None:
        self.p = subprocess.Popen([sys.executable, "-m", "healer", *args, "--interval", "100ms", "-C", str(root)],
                                  cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._q: queue.Queue = queue.Queue()
        self.out: list[str] = []
        threading.Thread(target=lambda: [self._q.put(x) for x in self.p.stdout], daemon=True).start()

    def text(self) -> str:
        while True:
            try:
                self.out.append(self._q.get_nowait())
            except queue.Empty:
                return "".join(self.out)

    def blocks(self) -> list[str]:
        return [b for b in self.text().split(HEADER) if b]

    def wait_blocks(self, n: int, *must: str) -> str:
        """Block `n` (from 1) once it is out, holding every string of `must`."""
        def ok():
            b = self.blocks()
            return b[n - 1] if len(b) >= n and all(m in b[n - 1] for m in must) else None

        return wait_until(ok, 60, lambda: f"block {n} with {must}; got {self.text()!r} (stderr: {self._err()})")

    def _err(self) -> str:
        return "" if self.p.poll() is None else self.p.stderr.read()

    def end(self, sig: int) -> tuple[int, str]:
        self.p.send_signal(sig)
        self.p.wait(timeout=30)  # not communicate(): it would read stdout beside the line reader
        err = self.p.stderr.read()
        self.text()
        return self.p.returncode, err

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(timeout=30)


def test_board_watch_prints_a_block_per_change_and_none_for_time_passing(tmp_path):
    root = _fleet(tmp_path)
    s = open_store(root)
    w = _Watch(root, "board", "--watch")
    try:
        s.add_ticket("first", id="T-1")
        # the watch may start before or after T-1: wait for a block that shows it
        wait_until(lambda: any("T-1" in b for b in w.blocks()), 60, lambda: f"T-1 shown; got {w.text()!r}")
        n = len(w.blocks())
        s.add_ticket("second", id="T-2")
        w.wait_blocks(n + 1, "T-2", "T-1")
        s.append("loop.started", "T-2-01", {"preset": "claude", "ticket": "T-2"})
        s.append("loop.iteration", "T-2-01", {"n": 1, "cost_usd": 0.5, "ticket": "T-2", "day": "2026-12-07"})
        w.wait_blocks(n + 2, "$0.5000")
        s.move_ticket("T-1", "closed", actor="human")
        w.wait_blocks(n + 3, "closed")
        code, err = w.end(signal.SIGINT)
    finally:
        w.kill()
        s.close()
    assert (code, err) == (0, ""), err  # Ctrl-C: quiet, exit 0
    blocks = w.blocks()
    # ages moved on between the changes (100 ms reads): no block but for the three changes
    assert len(blocks) == n + 3, blocks
    assert all(b.startswith("healer board at ") for b in blocks), blocks


def test_status_watch_shows_the_change_and_ends_on_sigterm(tmp_path):
    root = _fleet(tmp_path)
    s = open_store(root)
    w = _Watch(root, "status", "--watch")
    try:
        first = w.wait_blocks(1, "Tickets")
        assert "nothing spent yet" in first
        s.add_ticket("first", id="T-1")  # a ready ticket: its eligible_at is each read's now, not a change
        s.append("loop.started", "T-1-01", {"preset": "codex", "ticket": "T-1"})
        s.append("loop.iteration", "T-1-01", {"n": 1, "cost_usd": 1.25, "ticket": "T-1", "day": "2026-12-07"})
        second = wait_until(lambda: next((b for b in w.blocks()[1:] if "$1.25" in b), None), 60,
                            lambda: f"the spend shown; got {w.text()!r}")
        assert "codex" in second and "2026-12-07" in second
        n = len(w.blocks())
        s.move_ticket("T-1", "closed", actor="human")
        wait_until(lambda: any(re.search(r"closed\s*│\s*1\b", b) for b in w.blocks()[n:]), 60,
                   lambda: f"T-1 closed shown; got {w.text()!r}")
        code, err = w.end(signal.SIGTERM)
    finally:
        w.kill()
        s.close()
    assert (code, err) == (0, ""), err
    assert len(w.blocks()) == n + 1, w.blocks()


@pytest.mark.parametrize("cmd", [("status", "--watch"), ("board", "--watch"), ("board", "list", "--watch")])
def test_a_store_lost_under_a_watch_ends_it_as_the_command_without_watch(tmp_path, cmd):
    root = _fleet(tmp_path)
    s = open_store(root)
    s.add_ticket("first", id="T-1")
    s.close()
    w = _Watch(root, *cmd)
    try:
        w.wait_blocks(1)
        db = root / ".healer" / "healer.db"
        db.rename(tmp_path / "moved.db")  # the store lost: missing for a fleet that had a board
        code = w.p.wait(timeout=60)
        err = w.p.stderr.read()
    finally:
        w.kill()
    plain = healer(*([c for c in cmd if c != "--watch"] if cmd != ("board", "--watch") else ["board", "list"]),
                   "-C", str(root))
    assert plain.returncode == 74 and "no store, but this fleet had one" in plain.stderr, plain.stderr
    assert (code, err) == (plain.returncode, plain.stderr)


@pytest.mark.parametrize("args,why", [
    (("status", "--watch", "--interval", "2"), "status: --interval: expected a duration like 90s"),
    (("board", "--watch", "--interval", "0s"), "board: --interval: expected a duration above 0"),
    (("board", "list", "--watch", "--json"), "board list: --watch draws a table"),
    (("status", "--watch", "--json"), "status: --watch draws tables"),
    (("board",), "board: expected a command (add, list, show, label, comment, move, states) or --watch"),
])
def test_watch_usage_errors_are_one_line_exit_64(tmp_path, args, why):
    root = _fleet(tmp_path)
    r = healer(*args, "-C", str(root))
    assert r.returncode == 64 and r.stderr.startswith(f"healer: {why}") and len(r.stderr.splitlines()) == 1, r.stderr


def test_time_passing_changes_no_view_but_a_change_does(tmp_path):
    """What decides a new block: the view without its ages. An hour later, the same fleet is the same view (a ready
    ticket's eligible_at is the read's own now, an agent's age and heartbeat age grow); a move is a new one."""
    root = _fleet(tmp_path)
    s = open_store(root)
    try:
        s.add_ticket("ready", id="T-1")
        s.add_ticket("labelled", id="T-2", labels=["to-review"])
        pol, now = load_policy(None), s.now()
        s.upsert_agent(Agent("agent-1", "T-2", "running", pid=os.getpid(), started_at=now, heartbeat_at=now))
        a, b = fleet_status(s, pol, now), fleet_status(s, pol, now + 3600)
        assert a["queue"][0]["eligible_at"] == now and a["agents"][0]["age"] != b["agents"][0]["age"]
        assert stable(a) == stable(b)
        board = [{"id": "T-2", "labels": [{"label": "to-review", "age_s": 1.0}]}]
        assert stable(board) == stable([{"id": "T-2", "labels": [{"label": "to-review", "age_s": 3601.0}]}])
        s.move_ticket("T-1", "closed", actor="human")
        assert stable(fleet_status(s, pol, now + 3600)) != stable(b)
    finally:
        s.close()
