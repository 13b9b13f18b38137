"""The real product on several hosts: two fleet roots, each its own clone of one shared bare repository,
one PostgreSQL board, two real `healer dispatch` processes (fleet.shared_remote: origin) with the scripted
agent. The dispatcher holding the fleet is SIGKILLed mid-run; the other one finishes the work.

Outcomes checked: every ticket done; each ticket merged on the shared main exactly once (its trailer);
never two live attempts (nor two running agents) of one ticket."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import yaml

from healer import conventions as cv
from healer import lifecycle
from healer.store import open_url
from tests.conftest import git, make_repo, wait_until

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "chaos" / "agents" / "fleet_agent.py"
TICKETS = 6


def _policy() -> dict:
    cmd = [sys.executable, str(AGENT), "--task", "{task_file}", "--workdir", "{workdir}", "--run-id", "{run_id}",
           "--think", "1.0"]
    has_readme = "import os, sys; sys.exit(0 if os.path.exists('README.md') else 1)"
    return {"fleet": {"pool_size": 2, "dispatch_tick": "1s", "shared_remote": "origin", "loop_command": cmd,
                      "merge_gates": [{"name": "tree", "run": [sys.executable, "-c", has_readme], "timeout": "30s"}]},
            "loop": {"kill_grace": "1s"}, "notify": {"notifiers": [{"kind": "jsonl", "path": ".healer/notes.jsonl"}]}}


def _hosts(tmp_path: Path) -> tuple[Path, list[Path]]:
    seed = make_repo(tmp_path / "seed", {"README.md": "# shared\n", "healer.yaml": yaml.safe_dump(_policy())})
    bare = tmp_path / "shared.git"
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(bare))
    roots = []
    for name in ("host-a", "host-b"):
        r = tmp_path / name
        git(tmp_path, "clone", "-q", str(bare), str(r))
        git(r, "config", "user.email", "test@healer.invalid")
        git(r, "config", "user.name", "healer-test")
        (r / ".healer").mkdir()
        roots.append(r)
    return bare, roots


def _dispatch(root: Path, url: str) -> subprocess.Popen:
    env = {**os.environ, "HEALER_STORE_URL": url}
    log = open(root / ".healer" / "dispatch.log", "ab")  # noqa: SIM115 - closed with the process by the OS
    return subprocess.Popen([sys.executable, "-m", "healer", "dispatch", "--root", str(root)], env=env, stdout=log,
                            stderr=subprocess.STDOUT)


def _overlaps(spans: list[tuple[float, float | None]]) -> bool:
    spans = sorted(spans, key=lambda s: s[0])
    return any(a_end is None or a_end > b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False))


def test_two_real_dispatchers_share_one_board_and_one_repository(pg_url, tmp_path):
    bare, roots = _hosts(tmp_path)
    store = open_url(pg_url, root=roots[0])
    for i in range(TICKETS):
        store.add_ticket(f"ticket {i}", id=f"T-{i}", body="behaviour: success\n")
    procs = {r.name: _dispatch(r, pg_url) for r in roots}
    try:
        # the holder of the fleet runs a ticket or two, then its healer is SIGKILLed with agents still running
        wait_until(lambda: any(t.state == lifecycle.DONE for t in store.tickets())
                   and store.agents(states=["running"]), 90, "a ticket done and another running")
        lease = store.lease(cv.DISPATCH_LEASE)
        victim = next(name for name, p in procs.items() if p.pid == lease.pid)
        procs[victim].kill()
        procs[victim].wait(10)
        killed_at = store.clock.now()
        survivor = next(p for name, p in procs.items() if name != victim)

        def all_done():
            return all(t.state == lifecycle.DONE for t in store.tickets())

        wait_until(all_done, 120, lambda: f"every ticket done: {Counter(t.state for t in store.tickets())}")
        assert survivor.poll() is None, "the surviving dispatcher exited"
        assert store.lease(cv.DISPATCH_LEASE).pid == survivor.pid
        assert any(e.at > killed_at for e in store.events(kinds=["ticket.moved"], contains='"to":"done"')), \
            "nothing was finished after the kill"
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for a in store.agents(states=["running"]):  # none expected; never leave an agent behind
            if a.pid:
                try:
                    os.kill(a.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    # the shared main: each ticket merged exactly once, with its work in the tree
    log = git(bare, "log", "main", "--format=%B%x00")
    trailers = Counter(line.split(": ", 1)[1] for line in log.splitlines() if line.startswith("Healer-Ticket: "))
    assert trailers == Counter({f"T-{i}": 1 for i in range(TICKETS)})
    files = git(bare, "ls-tree", "-r", "--name-only", "main").splitlines()
    for i in range(TICKETS):
        assert any(f.startswith(f"work/T-{i}-") for f in files), f"T-{i}'s work is not on the shared main"
    # never two live attempts (nor two running agents) of one ticket
    for i in range(TICKETS):
        tid = f"T-{i}"
        atts = store.attempts(tid)
        assert atts and not _overlaps([(a.at, a.ended_at) for a in atts]), [(a.at, a.ended_at) for a in atts]
        ags = [a for a in store.agents() if a.ticket_id == tid]
        assert not _overlaps([(a.started_at, a.ended_at) for a in ags]), [(a.started_at, a.ended_at) for a in ags]
    store.close()


def test_a_shared_remote_that_is_not_a_remote_is_one_clear_line(tmp_path):
    from healer.errors import UsageError
    from healer.fleet.dispatcher import Dispatcher
    from healer.policy.schema import Policy
    from healer.store import open_store

    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir()
    store = open_store(root)
    try:
        pol = Policy.model_validate({"fleet": {"shared_remote": "origin"}})
        try:
            Dispatcher(root, pol, store)
        except UsageError as e:
            assert str(e) == f"fleet.shared_remote: expected a git remote of {root} (see `git remote -v`), got 'origin'"
        else:
            raise AssertionError("a missing shared remote was accepted")
    finally:
        store.close()
