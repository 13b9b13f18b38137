"""`healer up` says what it does, as a controller would (issue 43 item 3): after its start line, one line per ticket
transition and per supervisor action (with its intent and verified outcome), read from the event log by cursor;
never a line per tick. `--quiet` keeps the two lines it printed before.

A real `healer up` over a real git fleet, the scripted loop stand-in (chaos/agents/fleet_agent.py) as the agent."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import yaml

from healer.store import open_store
from tests.conftest import REPO, make_repo, wait_until
from tests.fleet.conftest import scripted_policy

STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00"


def _fleet(tmp_path: Path, *, stale_label: bool) -> Path:
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir()
    pol = scripted_policy(pool_size=2).model_dump(mode="json", by_alias=True)
    pol["fleet"]["dispatch_tick"] = "1s"
    pol["supervisor"] = {"tick": "1s"}
    (root / "healer.yaml").write_text(yaml.safe_dump(pol, sort_keys=False))
    s = open_store(root)
    try:
        s.add_ticket("ticket W-1", id="W-1", body="behaviour: success\n")
        if stale_label:  # a supervisor action: its to-review label 3 h old on a ticket no one works on (drop_label)
            s.add_ticket("labelled", id="S-1", state="needs_human", actor="dispatch")
            s.label("S-1", "to-review", actor="dispatch", at=s.now() - 3 * 3600)
            with s.tx() as db:
                db.execute("UPDATE tickets SET updated_at = updated_at - ? WHERE id = 'S-1'", (6 * 3600,))
    finally:
        s.close()
    return root


class _Up:
    """A real `healer up` child whose stdout lines are read by a thread (never a blocking read in the test)."""

    def __init__(self, root: Path, *args: str) -> None:
        self.p = subprocess.Popen([sys.executable, "-m", "healer", "up", "-C", str(root), *args], cwd=REPO,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._q: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [self._q.put(x.rstrip("\n")) for x in self.p.stdout], daemon=True).start()
        # stderr by a thread of its own too: communicate() would read stdout beside the thread above and could
        # swallow the stop line
        self._err: list[str] = []
        self._err_reader = threading.Thread(target=lambda: self._err.extend(self.p.stderr), daemon=True)
        self._err_reader.start()

    def seen(self) -> list[str]:
        while True:
            try:
                self.lines.append(self._q.get_nowait())
            except queue.Empty:
                return self.lines

    def stop(self) -> tuple[int, str]:
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(timeout=60)
        wait_until(lambda: self.seen() and self.seen()[-1].startswith("healer up: stopped"), 60, "the stop line")
        self._err_reader.join(timeout=30)
        return self.p.returncode, "".join(self._err)

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(timeout=30)


def _state(root: Path, tid: str) -> str:
    s = open_store(root)
    try:
        return s.ticket(tid).state
    finally:
        s.close()


def test_up_prints_each_transition_and_action_and_no_tick(tmp_path):
    root = _fleet(tmp_path, stale_label=True)
    up = _Up(root)
    try:
        done = "ticket W-1: review -> done"
        wait_until(lambda: any(done in x for x in up.seen()) and any("drop_label S-1" in x for x in up.seen()), 120,
                   lambda: f"W-1 delivered and S-1's label dropped, said on stdout; got {up.seen()}")
        code, err = up.stop()
    finally:
        up.kill()
    out = up.seen()
    assert code == 0, err[-3000:]
    assert out[0].startswith(f"healer up at {root}: dispatcher and supervisor running"), out
    assert out[-1] == "healer up: stopped", out
    body = out[1:-1]
    assert all(re.match(STAMP + " ", x) for x in body), body  # every line a timestamped controller line
    assert not [x for x in body if re.search(r"\btick(s|ed)?\b|\.tick|skipped", x)], body  # ticks stay quiet
    w1 = [re.sub("^" + STAMP + " ", "", x) for x in body if " ticket W-1: " in x]
    assert w1 == ["ticket W-1: queued -> in_progress (launch) by dispatch",
                  "ticket W-1: in_progress -> review (agent agent-W-1-1 exited 0) by dispatch",
                  "ticket W-1: review -> done (proposal 1 merged) by dispatch"], body
    [action] = [x for x in body if " action " in x]
    assert re.search(r"action drop_label S-1: intent \d+, done, verified \(stale_label:S-1 .*\) by supervisor$", action)
    assert _state(root, "W-1") == "done"


def test_up_quiet_prints_only_its_start_and_stop_lines(tmp_path):
    root = _fleet(tmp_path, stale_label=False)
    up = _Up(root, "--quiet")
    try:
        wait_until(lambda: _state(root, "W-1") == "done", 120, "W-1 done")
        code, err = up.stop()
    finally:
        up.kill()
    assert code == 0, err[-3000:]
    out = up.seen()
    assert len(out) == 2 and out[0].startswith("healer up at ") and out[1] == "healer up: stopped", out
