"""The product's own daemons on one PostgreSQL board: two fleet roots (two hosts' clones) each run
`healer supervise`; one leads, the other skips; SIGKILL the leader and the other takes over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import yaml

from healer.store import open_url
from tests.conftest import REPO, healer, make_repo, wait_until


def _root(tmp_path, name: str, url: str):
    root = make_repo(tmp_path / name)
    r = healer("init", "--store", url, cwd=root, env={"HEALER_STORE_URL": ""})
    assert r.returncode == 0, r.stderr
    pol = yaml.safe_load((root / "healer.yaml").read_text())
    pol["supervisor"] = {"tick": "1s", "lease_ttl": "4s"}
    (root / "healer.yaml").write_text(yaml.safe_dump(pol))
    return root


@pytest.mark.campaign  # two daemons and four CLI runs: about a minute on a loaded machine
def test_one_supervisor_leads_and_a_killed_leader_is_replaced(tmp_path, pg_url):
    roots = [_root(tmp_path, f"host{i}", pg_url) for i in (1, 2)]
    env = {**os.environ, "HEALER_STORE_URL": ""}
    procs = [subprocess.Popen([sys.executable, "-m", "healer", "supervise", "--root", str(r)], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
             for r in roots]
    board = open_url(pg_url)
    try:
        lease = wait_until(lambda: board.lease("supervisor"), timeout=120, what="a supervisor lease")
        wait_until(lambda: board.count_events("supervisor.skipped") >= 1 and board.count_events("supervisor.tick") >= 1,
                   timeout=120, what="one supervisor ticking, the other skipping")
        leader = next(p for p in procs if p.pid == lease.pid)
        leader.send_signal(signal.SIGKILL)
        leader.wait()
        new = wait_until(lambda: (cur := board.lease("supervisor")) is not None and cur.holder != lease.holder and cur,
                         timeout=60, what="a takeover")
        assert new.token > lease.token
        wait_until(lambda: any(e.payload.get("holder") == new.holder for e in board.events(kinds=["supervisor.tick"])),
                   timeout=60, what="the new leader's tick")
        ticks = board.events(kinds=["supervisor.tick"])
        assert {e.payload["holder"] for e in ticks} == {lease.holder, new.holder}
        assert board.count_events("supervisor.error") == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        board.close()
