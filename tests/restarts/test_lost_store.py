"""Full disk, deleted .healer/, replaced or read-only store: `up` survives what passes, stops on what is lost.

A small tmpfs (root needed: skipped elsewhere, required under CI=true; marked `campaign`: about a minute)
is filled while a real `healer up` runs a real fleet: every pass that fails says so in one line and the next pass retries; once space is back
every ticket ends done exactly once and no traceback was printed. A deleted `.healer/` stops `up` with one
line (exit 70) instead of a split brain; read-only commands work on a read-only `.healer/`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.storm import AGENT, StormConfig, StormRun, problems
from healer.errors import StoreLost
from healer.store import open_store
from tests.conftest import fill_disk, git, make_repo, need_root, wait_until


def test_the_scripted_agent_works_again_once_space_is_back(tiny_disk):
    """The campaign below lost a ticket to its stand-in agent, not to healer: a worktree's first run on
    the full disk left the agent's run counter empty and every later run died reading it (the same
    failure twice, so the supervisor rightly escalated). The counter is now renamed into place."""
    repo = make_repo(tiny_disk / "repo")
    task = tiny_disk / "task.md"
    task.write_text("behaviour: success\n")

    def agent(run_id: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(AGENT), "--task", str(task), "--workdir", str(repo), "--run-id", run_id],
                              capture_output=True, text=True, env={k: v for k, v in os.environ.items() if not k.startswith("HEALER_")})

    ballast = tiny_disk / "ballast"
    fill_disk(ballast)
    assert agent("r1").returncode != 0  # the worktree's first run, on a full disk: it fails, as any would
    ballast.unlink()
    r = agent("r2")
    assert r.returncode == 0, r.stderr
    assert (repo / ".healer" / "fleet_agent.runs").read_text() == "1"  # r1 could not count itself
    assert agent("r3").returncode == 0
    assert git(repo, "log", "--format=%s").splitlines()[:2] == ["agent r3: step 2", "agent r2: step 1"]


def _story(s, log) -> str:
    """What a failure needs: each ticket's state, the events of those not done, the end of `up`'s output."""
    out = [", ".join(f"{t.id} {t.state}" for t in s.tickets())]
    for t in s.tickets():
        if t.state != "done":
            out += [f"  {e.kind} {json.dumps(e.payload, sort_keys=True)[:300]}" for e in s.events(subject=t.id)]
            for f in sorted((Path(s.root) / ".healer" / "logs" / "agents").glob(f"agent-{t.id}-*.log")):
                out += [f"  {f.name}:", *("    " + ln for ln in f.read_text(errors="replace").splitlines()[-12:])]
    out += log.read_text(errors="replace").splitlines()[-40:]
    return "\n".join(out)


@pytest.mark.campaign
def test_a_full_disk_costs_passes_not_tickets(tiny_disk, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    run = StormRun(StormConfig(seed=1, tickets=4, kills=0, pool_size=2, agent_delay=0.5, finish_timeout=240), tiny_disk,
                   logs=logs, overrides={"fleet": {"min_free": 4 << 20}})  # a 24 MB disk: the default 256 MiB would hold every launch
    run.setup()
    proc, log = run.start_up(0)
    try:
        run.wait_started(proc, log)
        ballast = tiny_disk / "ballast"
        fill_disk(ballast)
        wait_until(lambda: b"pass failed" in log.read_bytes(), 60, "a pass to fail on the full disk")
        for _ in range(4):  # several passes on a full disk: `up` stays up
            assert proc.poll() is None, log.read_text()
            run.wall.sleep(1)
        ballast.unlink()
        s = open_store(run.root)
        try:
            wait_until(lambda: all(t.state == "done" for t in s.tickets()), 240,
                       lambda: "every ticket done once space is back:\n" + _story(s, log))
        finally:
            s.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        run.cleanup()
    out = log.read_text()
    assert "Traceback" not in out, out
    run.outputs.append(out)
    facts = run.facts()
    assert problems(facts) == [], facts


def test_a_deleted_healer_folder_stops_up_with_one_line(tmp_path):
    run = StormRun(StormConfig(seed=1, tickets=2, kills=0, pool_size=1, agent_delay=5), tmp_path)
    run.setup()
    proc, log = run.start_up(0)
    try:
        run.wait_started(proc, log)
        for _ in range(100):  # the running daemon may write a file into the folder while it is being removed
            try:
                shutil.rmtree(run.root / ".healer")
                break
            except OSError:
                continue
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        run.cleanup()
    out = log.read_text()
    assert code == 70, out
    assert "Traceback" not in out
    lines = [x for x in out.splitlines() if x.startswith("healer:")]
    assert len(lines) == 1 and "deleted" in lines[0], out
    assert not (run.root / ".healer" / "healer.db").exists(), "a fresh store was created behind the lost one"


def test_a_replaced_store_is_detected(tmp_path):
    (tmp_path / ".healer").mkdir()
    s = open_store(tmp_path)
    s.add_ticket("x")
    s.check()
    db = tmp_path / ".healer" / "healer.db"
    shutil.copy(db, tmp_path / "copy.db")
    os.replace(tmp_path / "copy.db", db)
    with pytest.raises(StoreLost, match="replaced"):
        s.check()
    s.close()


@pytest.fixture
def read_only_healer(tmp_path):
    need_root()
    run = StormRun(StormConfig(seed=1, tickets=3, kills=0), tmp_path)
    run.setup()
    h = run.root / ".healer"
    subprocess.run(["mount", "--bind", str(h), str(h)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(h)], check=True)
        yield run.root
    finally:
        subprocess.run(["umount", str(h)], check=False)


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_read_only_commands_work_on_a_read_only_healer_folder(read_only_healer):
    env = {k: v for k, v in os.environ.items() if k not in ("HEALER_ROOT", "HEALER_FAILPOINTS")}
    for cmd in (["status"], ["plan"], ["journal", "-n", "5"]):
        r = subprocess.run([sys.executable, "-m", "healer", *cmd, "-C", str(read_only_healer)], capture_output=True,
                           text=True, env=env, timeout=120)
        assert r.returncode == 0, (cmd, r.stderr)
        assert "Traceback" not in r.stderr
