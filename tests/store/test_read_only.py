"""A database that takes no writes (issue 40): `default_transaction_read_only = on` for the whole server (ALTER SYSTEM
and a reload, every session at once, as a standby not promoted yet after a failover answers). Real parts: a throwaway
PostgreSQL cluster of this module's own, real `healer up` and `healer loop run` processes.

- the daemons count it against store.outage_tolerance like an unreachable server: one line per outage, a
  store.unavailable / store.back pair, exit 69 with one line past the tolerance;
- the loop runner's store writes ride it out; past the tolerance the run ends 69 with cause store_unavailable (the
  fleet counts it against no budget), never an exit 70 charged to the agent, and a resume goes on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import yaml

from healer import lifecycle
from healer.core import endings
from healer.store import open_url, outage
from tests.conftest import make_repo, wait_until
from tests.store.conftest import _start_cluster, fresh_schema
from tests.store.test_outage import _policy, _stop, _up

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pg():
    cluster = _start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def url(pg):
    with fresh_schema(pg.url) as u:
        yield u
    pg.read_only(False)


def test_a_read_only_refusal_is_the_store_being_away(pg, url, tmp_path):
    store = open_url(url, root=tmp_path)
    try:
        pg.read_only(True)
        with pytest.raises(psycopg.Error) as e:
            store.add_ticket("x")
        assert outage.unavailable(e.value) and e.value.sqlstate == "25006"
        assert endings.cause_of(str(e.value), type(e.value).__name__) == endings.STORE_UNAVAILABLE
        # an outage is ended by a write, not by a read that got through: the read-only server answers reads
        outage.note(store, e.value)
        assert store.tickets() == [] and outage.ok(store) is None and outage.tracker(store).down
        pg.read_only(False)
        assert outage.ok(store) is not None and not outage.tracker(store).down
        assert len(store.events(kinds=["store.unavailable"])) == len(store.events(kinds=["store.back"])) == 1
    finally:
        store.close()


@pytest.mark.long  # 7 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_up_rides_out_a_read_only_database_with_one_line(pg, url, tmp_path):
    root = make_repo(tmp_path / "fleet", {"README.md": "# x\n", "healer.yaml": yaml.safe_dump(_policy())})
    (root / ".healer").mkdir()
    store = open_url(url, root=root)
    for i in range(3):
        store.add_ticket(f"ticket {i}", id=f"T-{i}", body="behaviour: success\n")
    up = _up(root, url)
    log = root / ".healer" / "up.log"
    try:
        wait_until(lambda: store.agents(states=["running"]) or up.poll() is not None, 60, "an agent running")
        pg.read_only(True)
        wait_until(lambda: "store unavailable (" in log.read_text() or up.poll() is not None, 30, "the outage's line")
        pg.read_only(False)
        wait_until(lambda: store.events(kinds=["store.back"]) or up.poll() is not None, 60, lambda: log.read_text()[-3000:])
        wait_until(lambda: all(t.state == lifecycle.DONE for t in store.tickets()) or up.poll() is not None, 120,
                   lambda: f"every ticket done: {[(t.id, t.state) for t in store.tickets()]}")
        assert up.poll() is None, log.read_text()[-2000:]
    finally:
        pg.read_only(False)
        code = _stop(up)
    text = log.read_text()
    assert code == 0, text[-2000:]
    assert "Traceback" not in text and "pass failed" not in text, text[-3000:]
    assert 1 <= text.count("store unavailable (") <= 2, text[-3000:]  # one per process tracker, never one per pass
    assert not [a for t in store.tickets() for a in store.attempts(t.id) if a.exit_code not in (0, None)]
    store.close()


@pytest.mark.long  # 7 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_up_left_read_only_past_the_tolerance_ends_with_69(pg, url, tmp_path):
    root = make_repo(tmp_path / "fleet", {"README.md": "# x\n", "healer.yaml": yaml.safe_dump(
        _policy(outage_tolerance="3s"))})
    (root / ".healer").mkdir()
    open_url(url, root=root).close()
    up = _up(root, url)
    log = root / ".healer" / "up.log"
    try:
        wait_until(lambda: "dispatcher and supervisor running" in log.read_text() or up.poll() is not None, 60, "up running")
        pg.read_only(True)
        code = up.wait(120)
    finally:
        pg.read_only(False)
        _stop(up)
    text = log.read_text()
    assert code == 69, text[-2000:]
    assert "Traceback" not in text and "pass failed" not in text, text[-3000:]
    last = [ln for ln in text.splitlines() if ln.strip()][-1]
    assert last.startswith("healer: up: ") and "store.outage_tolerance (3s)" in last, last


def _loop(repo: Path, root: Path, url: str, *more: str) -> subprocess.Popen:
    env = {**os.environ, "HEALER_STORE_URL": url}
    env.pop("HEALER_AGENT_ID", None)
    args = [sys.executable, "-m", "healer", "loop", "run", "--policy", str(root / "healer.yaml"), "--workdir", str(repo),
            "--root", str(root), *more]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _loop_fleet(tmp_path: Path, url: str, tolerance: str) -> tuple[Path, Path]:
    # the agent waits for a file the test writes: the database turns read-only while it works
    agent = "import os,time\nwhile not os.path.exists(os.environ['GO']): time.sleep(0.05)\nopen('calc.txt','w').write('ok')\n"
    gate = [sys.executable, "-c", "import sys; sys.exit(0 if open('calc.txt').read() == 'ok' else 1)"]
    pol = {"loop": {"max_iterations": 2, "iteration_timeout": "60s", "sandbox": "none", "gates": [
        {"name": "t", "run": gate}], "agent": {"preset": "command", "command": [sys.executable, "agent.py"]}},
        "store": {"outage_tolerance": tolerance}}
    root = make_repo(tmp_path / "fleet", {"README.md": "# x\n", "healer.yaml": yaml.safe_dump(pol)})
    (root / ".healer").mkdir()
    open_url(url, root=root).close()
    repo = make_repo(tmp_path / "work", {"agent.py": agent, "task.md": "# do it\n"})
    return root, repo


@pytest.mark.long  # 17 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@pytest.mark.parametrize("tolerance,code", [("60s", 0), ("2s", 69)])
def test_the_loop_runner_rides_out_a_read_only_store_or_ends_69_for_the_infrastructure(pg, url, tmp_path, monkeypatch,
                                                                                       tolerance, code):
    root, repo = _loop_fleet(tmp_path, url, tolerance)
    go = tmp_path / "go"
    monkeypatch.setenv("GO", str(go))
    p = _loop(repo, root, url, "--task", str(repo / "task.md"))
    try:
        wait_until(lambda: list((repo / ".healer" / "runs").glob("*/iter-001/agent.out")) or p.poll() is not None, 60,
                   "the agent running")
        pg.read_only(True)
        go.write_text("go")  # the agent ends, the gates pass: the run's next writes meet a read-only store
        if code == 0:
            with pytest.raises(subprocess.TimeoutExpired):  # 3 s of a read-only store: the runner must not end
                p.wait(3)
            pg.read_only(False)
        out, _ = p.communicate(timeout=120)
    finally:
        pg.read_only(False)
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == code, out[-3000:]
    assert "internal error" not in out and "Traceback" not in out, out[-3000:]
    run = next((repo / ".healer" / "runs").iterdir())
    res = json.loads((run / "result.json").read_text())
    assert res["exit_code"] == code
    if code == 69:
        assert res["cause"] == endings.STORE_UNAVAILABLE, res
        assert endings.classify(69, cause=res["cause"]).infra
        assert out.count("the store is unavailable (") == 1, out[-3000:]
        # the store is back: the same run goes on and ends green (its gates pass again, then it commits)
        cp = subprocess.run([sys.executable, "-m", "healer", "loop", "run", "--workdir", str(repo), "--root", str(root),
                             "--resume", run.name], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "HEALER_STORE_URL": url})
        assert cp.returncode == 0, cp.stdout + cp.stderr
    else:
        assert "the store is back after" in out, out[-3000:]
