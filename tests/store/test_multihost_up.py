"""The real product on several hosts: two fleet roots, each its own clone of one shared bare repository and
its own host id ($HEALER_HOST_ID), one PostgreSQL board, two real `healer up` processes (fleet.shared_remote:
origin) with the scripted agent. Both hosts claim and run tickets at once; one host's `healer up` is SIGKILLed
with an agent running: once its host lease expires the leading supervisor (the other host's) fences it and
requeues its tickets; the host comes back (as a service manager would restart it) with a new token.

Outcomes checked: every ticket done; each ticket merged on the shared main exactly once (its trailer) with
its work; both hosts ran agents at the same time; never two live attempts of one ticket; the lost host's
ticket was taken back by the leader after the host ttl, not before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import psutil
import pytest
import yaml

from healer import lifecycle
from healer.core import hosts
from healer.store import open_url
from tests.conftest import git, make_repo, wait_until

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "chaos" / "agents" / "fleet_agent.py"
TICKETS = 6
HOST_TTL = 4.0


def _policy() -> dict:
    cmd = [sys.executable, str(AGENT), "--task", "{task_file}", "--workdir", "{workdir}", "--run-id", "{run_id}",
           "--think", "1.5"]
    has_readme = "import os, sys; sys.exit(0 if os.path.exists('README.md') else 1)"
    return {"fleet": {"pool_size": 2, "dispatch_tick": "1s", "shared_remote": "origin", "loop_command": cmd,
                      "host_ttl": f"{HOST_TTL:g}s",
                      "merge_gates": [{"name": "tree", "run": [sys.executable, "-c", has_readme], "timeout": "30s"}]},
            "supervisor": {"tick": "1s", "lease_ttl": "4s"},
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


def _up(root: Path, url: str) -> subprocess.Popen:
    env = {**os.environ, "HEALER_STORE_URL": url, "HEALER_HOST_ID": root.name}
    log = open(root / ".healer" / "up.log", "ab")  # noqa: SIM115 - closed with the process by the OS
    return subprocess.Popen([sys.executable, "-m", "healer", "up", "--root", str(root)], env=env, stdout=log,
                            stderr=subprocess.STDOUT)


def _overlaps(spans: list[tuple[float, float | None]]) -> bool:
    spans = sorted(spans, key=lambda s: s[0])
    return any(a_end is None or a_end > b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False))


def _kill_leftovers(roots: list[Path]) -> None:
    """Agents of a SIGKILLed `healer up` outlive it (their own session): never leave one behind."""
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get("HEALER_ROOT") in {str(r.resolve()) for r in roots}:
                p.kill()
        except (psutil.Error, OSError):
            pass


@pytest.mark.long  # 17 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_two_real_healer_up_share_one_board_and_one_repository(pg_url, tmp_path):
    bare, roots = _hosts(tmp_path)
    store = open_url(pg_url, root=roots[0])
    for i in range(TICKETS):
        store.add_ticket(f"ticket {i}", id=f"T-{i}", body="behaviour: success\n")
    procs = {r.name: _up(r, pg_url) for r in roots}
    try:
        # both hosts run agents at once; then one host's healer is SIGKILLed while an agent of it runs
        def both_busy():
            return {a.host for a in store.agents(states=["running"])} == set(procs)

        wait_until(both_busy, 90, "both hosts running an agent at once")
        victim = next(a.host for a in store.agents(states=["running"]))
        procs[victim].kill()
        procs[victim].wait(10)
        killed_at = store.clock.now()
        held = [a.ticket_id for a in store.agents(states=["running"]) if a.host == victim]

        wait_until(lambda: store.events(kinds=["host.reclaimed"]), 60, "the leader taking the lost host's tickets back")
        reclaimed = store.events(kinds=["host.reclaimed"])
        assert {e.payload["host"] for e in reclaimed} == {victim}
        assert all(e.at - killed_at >= HOST_TTL - 1.0 for e in reclaimed), "a host was given up before its lease expired"
        procs[victim] = _up(next(r for r in roots if r.name == victim), pg_url)  # its service manager restarts it

        def all_done():
            return all(t.state == lifecycle.DONE for t in store.tickets())

        wait_until(all_done, 120, lambda: f"every ticket done: {Counter(t.state for t in store.tickets())}")
        assert all(p.poll() is None for p in procs.values()), "a healer up exited"
        fenced = store.events(kinds=["lease.taken_over"], subject=hosts.lease_name(victim))
        assert any(e.payload["to"].startswith(hosts.FENCED) for e in fenced), "the lost host was not fenced"
        assert held, "the victim held no ticket when it was killed"
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
        _kill_leftovers(roots)

    # the shared main: each ticket merged exactly once, with its work in the tree
    log = git(bare, "log", "main", "--format=%B%x00")
    trailers = Counter(line.split(": ", 1)[1] for line in log.splitlines() if line.startswith("Healer-Ticket: "))
    assert trailers == Counter({f"T-{i}": 1 for i in range(TICKETS)})
    files = git(bare, "ls-tree", "-r", "--name-only", "main").splitlines()
    for i in range(TICKETS):
        assert any(f.startswith(f"work/T-{i}-") for f in files), f"T-{i}'s work is not on the shared main"
    # never two live attempts of one ticket; both hosts ran agents
    for i in range(TICKETS):
        atts = store.attempts(f"T-{i}")
        assert atts and not _overlaps([(a.at, a.ended_at) for a in atts]), [(a.at, a.ended_at) for a in atts]
    assert {a.host for a in store.agents()} == set(procs)
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
