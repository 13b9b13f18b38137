"""The long-running dispatcher and its heartbeats."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from healer.fleet.dispatch_board import handle_of
from healer.store import open_store
from tests.conftest import wait_until
from tests.fleet.conftest import scripted_policy
from tests.fleet.test_cli import cli_fleet, stop_all


def test_paused_agent_gets_no_heartbeat_running_one_does(fleet_factory):
    f = fleet_factory(scripted_policy())
    f.add("T-1", "hang")
    f.d.tick()
    a = wait_until(lambda: f.running("T-1"), what="agent")[0]
    wait_until((Path(a.worktree) / ".healer" / "runs" / a.run_id / f"ready.{a.pid}").exists, what="ready")
    os.kill(a.pid, signal.SIGSTOP)
    try:
        wait_until(lambda: f.d.runtime.status(handle_of(a)).state == "paused", what="stopped")
        f.clock.advance(600)
        f.d.tick()
        b = f.store.agent(a.id)
        assert b.heartbeat_at == a.heartbeat_at and b.state == "running"
    finally:
        os.kill(a.pid, signal.SIGCONT)
    f.clock.advance(60)
    f.d.tick()
    assert f.store.agent(a.id).heartbeat_at == f.clock.now()


def test_dispatch_daemon_ticks_and_stops_on_sigterm(tmp_path):
    root = cli_fleet(tmp_path)
    pol = (root / "healer.yaml").read_text().replace("dispatch_tick: 30s", "dispatch_tick: 1s")
    (root / "healer.yaml").write_text(pol)
    s = open_store(root)
    s.add_ticket("a", id="T-1", body="behaviour: success\n")
    s.add_ticket("b", id="T-2", body="behaviour: success\n", blocked_by=["T-1"])
    s.close()
    p = subprocess.Popen([sys.executable, "-m", "healer", "dispatch", "-C", str(root)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        def both_done():
            st = open_store(root)
            try:
                return all(st.ticket(t).state == "done" for t in ("T-1", "T-2"))
            finally:
                st.close()

        wait_until(both_done, timeout=60, what="both tickets merged by the daemon")
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        assert "merged T-1" in out and "merged T-2" in out
        s = open_store(root)
        assert s.lease("dispatcher") is None  # released on a clean stop
        assert s.get_setting("dispatch.last_tick_at") is not None
        s.close()
    finally:
        if p.poll() is None:
            p.kill()
        stop_all(root)
