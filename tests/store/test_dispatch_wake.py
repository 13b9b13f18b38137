"""A dispatcher on a shared PostgreSQL board wakes when another host queues work (LISTEN/NOTIFY),
not at its next tick."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from healer.clock import system
from healer.fleet.dispatcher import Dispatcher
from healer.fleet.process_runtime import ProcessRuntime
from healer.policy.schema import Policy
from healer.store import open_url
from tests.conftest import REPO, make_repo, wait_until
from tests.fleet.conftest import scripted_policy
from tests.fleet.test_cli import cli_fleet, stop_all


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_the_daemon_launches_work_queued_on_the_shared_board_without_waiting_for_its_tick(tmp_path, pg_url, monkeypatch):
    """docs/scale.md: a dispatcher LISTENs on a connection of its own and runs a pass as soon as a ticket is added
    on any host. The tick here is an hour: only the board's wake-up can launch the ticket within the test."""
    monkeypatch.setenv("HEALER_STORE_URL", pg_url)  # the loops it launches reach the same board
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir()
    data = scripted_policy().model_dump(mode="json", by_alias=True)
    data["fleet"]["dispatch_tick"] = "1h"
    store, board, clock = open_url(pg_url), open_url(pg_url), system()
    d = Dispatcher(root, Policy.model_validate(data), store, clock, ProcessRuntime())
    passes: list = []
    daemon = threading.Thread(target=d.run_forever, kwargs={"on_tick": passes.append}, name="test-dispatch", daemon=True)
    daemon.start()
    try:
        wait_until(lambda: passes, timeout=60, what="the daemon's first pass")
        added = [clock.monotonic() - 10]

        def launched() -> bool:
            # the watch starts listening after the first pass: a ticket queued before it listens is seen at the
            # next tick (an hour), so another host queues one more every few seconds until one is launched
            if clock.monotonic() - added[-1] >= 3:
                board.add_ticket("queued elsewhere", id=f"T-{len(added)}", body="behaviour: success\n")
                added.append(clock.monotonic())
            return any(t.state != "queued" for t in board.tickets())

        wait_until(launched, timeout=60, what="a ticket queued on the shared board launched before the hourly tick")
    finally:
        d.stop()
        daemon.join(60)
        d.stop_agents(grace=1.0)
        store.close()
        board.close()


@pytest.mark.long  # 5 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
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
