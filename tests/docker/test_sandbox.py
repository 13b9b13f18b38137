"""The repair agent's sandbox: no network, nothing writable outside scratch, MCP over stdio only."""

from __future__ import annotations

import json
import socket
import sys

import pytest
import yaml

from healer.repair import container
from tests.conftest import healer, make_repo, wait_until
from tests.docker.conftest import require_engine

pytestmark = pytest.mark.docker
require_engine()
PY = sys.executable


@pytest.fixture
def fleet(tmp_path):
    root = make_repo(tmp_path / "fleet")
    r = healer("init", "--root", str(root))
    assert r.returncode == 0, r.stderr
    return root


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_scripted_agent_cannot_escape(dclient, fleet, tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    scratch = fleet / ".healer" / "repair" / "RX" / "cwd"
    result = scratch / "escape.json"
    forbidden = [str(fleet / "escape.txt"), str(fleet / ".healer" / "escape.txt"), str(fleet / ".healer" / "healer.db"),
                 str(tmp_path / "escape.txt")]
    with open(tmp_path / "agent.err", "wb") as err, open(tmp_path / "server.err", "wb") as serr:
        done = container.run([PY, "-m", "chaos.agents.docker_escape", str(result), "--port", str(port), "--forbidden", *forbidden],
                           scratch=scratch, readonly=[scratch.parent], timeout=60, stderr=err,
                           server_argv=[PY, "-m", "healer", "mcp", "serve", "--root", str(fleet), "--run-id", "RX"],
                           server_stderr=serr, labels={"healer.fleet": str(fleet)})
    srv.close()
    assert (done.exit_code, done.timed_out) == (0, False), (tmp_path / "agent.err").read_text()
    r = json.loads(result.read_text())
    assert r["connect"]["connected"] is False  # a real server listens on the host's 127.0.0.1
    assert r["interfaces"] == ["lo"]
    assert r["uid"] != 0
    leaked = [w for w in r["writes"] if w["written"]]
    assert leaked == [], leaked
    assert len(r["writes"]) >= 10
    assert not (fleet / "escape.txt").exists() and not (tmp_path / "escape.txt").exists()
    assert r["scratch_write"]["written"] is True and (scratch / "inside.txt").exists()
    assert "fleet_status" in r["mcp"]["tools"] and "requeue_ticket" in r["mcp"]["tools"]  # the one door left open
    assert dclient.containers.list(all=True, filters={"label": f"healer.fleet={fleet}"}) == []  # nothing left behind


# serial: a wall-clock budget (a 2 s deadline seen within 15 s)
@pytest.mark.serial
def test_deadline_kills_the_sandbox(dclient, tmp_path):
    scratch = tmp_path / "scratch"
    done = container.run([PY, "-c", "import time; time.sleep(120)"], scratch=scratch, timeout=2, grace=1,
                       labels={"healer.test": str(tmp_path)})
    assert done.timed_out and done.exit_code is None and done.elapsed < 15
    assert dclient.containers.list(all=True, filters={"label": f"healer.test={tmp_path}"}) == []


@pytest.mark.long  # 13 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_repair_launcher_runs_the_builtin_agent_in_the_sandbox(dclient, fleet):
    pol = fleet / "healer.yaml"
    data = yaml.safe_load(pol.read_text()) or {}
    data.setdefault("repair_agent", {}).setdefault("agent", {})["sandbox"] = "docker"
    pol.write_text(yaml.safe_dump(data))
    r = healer("repair", "run", "--root", str(fleet), "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert (res["exit_code"], res["timed_out"]) == (0, False)
    assert res["calls"] >= 2  # its tool calls went through the relay to the host's MCP server, and were audited
    report = _last_json((fleet / ".healer" / "repair" / res["run_id"] / "agent.err").read_text())
    assert report["agent"] == "builtin"
    wait_until(lambda: not dclient.containers.list(all=True, filters={"label": f"healer.run={res['run_id']}"}),
             what="the sandbox container removed")


def _last_json(text: str) -> dict:
    start = text.rfind("\n{\n") + 1 if "\n{\n" in text else text.find("{")
    return json.loads(text[start:])
