"""A dispatcher on a shared PostgreSQL board wakes when another host queues work (LISTEN/NOTIFY),
not at its next tick."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from healer.clock import system
from healer.store import open_url
from tests.conftest import REPO, wait_until
from tests.fleet.test_cli import cli_fleet, stop_all


def test_a_ticket_added_elsewhere_is_launched_long_before_the_next_tick(tmp_path, pg_url):
    root = cli_fleet(tmp_path)
    pol = (root / "healer.yaml").read_text().replace("dispatch_tick: 30s", "dispatch_tick: 5m")
    (root / "healer.yaml").write_text(pol)
    env = {**os.environ, "HEALER_STORE_URL": pg_url}
    p = subprocess.Popen([sys.executable, "-m", "healer", "dispatch", "-C", str(root)], cwd=REPO, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    board = open_url(pg_url)
    clock = system()
    try:
        wait_until(lambda: board.lease("dispatcher"), timeout=120, what="the dispatcher's first pass")
        clock.sleep(2)  # the first pass is over: only a wake-up can launch what comes next
        t0 = clock.monotonic()
        board.add_ticket("from another host", id="T-1", body="behaviour: success\n")
        wait_until(lambda: board.ticket("T-1").state != "queued", timeout=120, what="T-1 launched")
        assert clock.monotonic() - t0 < 120  # the tick is 5 minutes away
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        os.environ["HEALER_STORE_URL"] = pg_url
        try:
            stop_all(root)
        finally:
            del os.environ["HEALER_STORE_URL"]
        board.close()
