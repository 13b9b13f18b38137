"""Chaos Toolkit interoperability against the REAL chaostoolkit / chaostoolkit-lib / chaostoolkit-reporting:
healer runs a CTK experiment on a real fleet, `chaos run` drives healer's extension, and CTK's own
report code reads healer's journals."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from healer.store import open_store
from tests.conftest import PY, REPO, healer, make_repo, wait_until

HERE = Path(__file__).parent
EXPERIMENT = HERE / "experiments" / "heal-frozen-ticket.yaml"
CHAOS = shutil.which("chaos", path=str(Path(sys.executable).parent))


def _fleet(tmp_path: Path, policy: str = "") -> Path:
    root = make_repo(tmp_path / "fleet")
    assert healer("init", "--root", str(root)).returncode == 0
    if policy:
        (root / "healer.yaml").write_text(policy)
    return root


class _Status(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *a):
        pass


@pytest.fixture
def status_url():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Status)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/status"
    srv.shutdown()
    srv.server_close()


def _env(root: Path, url: str) -> dict:
    return {"GD_STATUS_URL": url, "GD_PYTHON": PY, "GD_TOKEN": "s3cret", "HEALER_GAMEDAY_HOME": str(root.parent / "gd-home")}


@pytest.mark.long  # 6 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_healer_runs_a_chaos_toolkit_experiment_on_a_real_fleet(tmp_path, status_url):
    root = _fleet(tmp_path)
    out = tmp_path / "report"
    r = healer("gameday", "run", str(EXPERIMENT), "--root", str(root), "--report", str(out), "--junit", str(tmp_path / "j.xml"),
               env=_env(root, status_url), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    j = json.loads((out / "journal.json").read_text())
    assert j["status"] == "completed" and j["deviated"] is False
    before, after = j["steady_states"]["before"], j["steady_states"]["after"]
    assert before["steady_state_met"] and after["steady_state_met"]
    assert [p["activity"]["provider"]["type"] for p in before["probes"]] == ["python", "http", "process"]
    names = [a["activity"]["name"] for a in j["run"]]
    assert names == ["freeze a ticket in progress", "move it in progress long ago", "the supervisor sees it", "one supervisor tick"]
    assert j["run"][2]["output"] == 1  # the probe saw the frozen ticket before healer's tick
    assert [a["status"] for a in j["rollbacks"]] == ["succeeded"] and (root / "rolled-back").read_text() == "yes"
    assert (root / "undone-by-healer").read_text() == "yes"  # the command fault's undo, from healer's undo journal
    assert j["healer"]["undo"][0]["kind"] == "command"
    s = open_store(root)
    try:
        assert [t.state for t in s.tickets()] == ["queued"]  # healed for real: requeued by the supervisor
    finally:
        s.close()
    assert {"report.md", "report.html", "journal.json"} <= {p.name for p in out.iterdir()}
    assert 'failures="0"' in (tmp_path / "j.xml").read_text()
    assert not any((root.parent / "gd-home").glob("ctk-*"))  # nothing left behind


@pytest.mark.campaign  # real processes, minutes on a shared machine: `make campaigns` (CI runs it)
def test_a_broken_steady_state_is_exit_1_and_a_bad_experiment_exit_65(tmp_path, status_url):
    root = _fleet(tmp_path)
    exp = json.loads(json.dumps(__import__("yaml").safe_load(EXPERIMENT.read_text())))
    exp["steady-state-hypothesis"]["probes"][0]["tolerance"] = False  # the healthy fleet now deviates
    f = tmp_path / "exp.json"
    f.write_text(json.dumps(exp))
    r = healer("gameday", "run", str(f), "--root", str(root), "--report", str(tmp_path / "out"), env=_env(root, status_url))
    assert r.returncode == 1, r.stderr
    j = json.loads((tmp_path / "out" / "journal.json").read_text())
    assert j["steady_states"]["before"]["steady_state_met"] is False and j["run"] == []
    f.write_text(json.dumps({"title": "no method", "method": []}))
    r = healer("gameday", "run", str(f))
    assert r.returncode == 65 and r.stderr.count("\n") == 1 and "invalid Chaos Toolkit experiment" in r.stderr


@pytest.mark.campaign  # real processes, minutes on a shared machine: `make campaigns` (CI runs it)
def test_chaos_run_kills_a_supervisor_and_freezes_dispatch_through_healers_extension(tmp_path):
    if CHAOS is None:
        pytest.fail("the chaostoolkit CLI (`chaos`) is not installed; it is in the dev extra")
    root = _fleet(tmp_path, "supervisor:\n  tick: 1s\nfleet:\n  dispatch_tick: 1s\n"
                            "loop:\n  agent: {command: [python3, -c, pass]}\n  gates: [{name: ok, run: [python3, -c, pass]}]\n")
    env = {**os.environ, "HEALER_ROOT": str(root), "HEALER_GAMEDAY_HOME": str(tmp_path / "gd-home")}
    daemons = [subprocess.Popen([PY, "-m", "healer", cmd, "--root", str(root)], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL) for cmd in ("supervise", "dispatch")]
    try:
        def leases():
            s = open_store(root)
            try:
                return s.lease("supervisor") is not None and s.lease("dispatcher") is not None
            finally:
                s.close()

        wait_until(leases, 60, "both leases held")
        exp = {
            "version": "1.0.0", "title": "kill the supervisor, freeze dispatch", "description": "healer's extension",
            "configuration": {"healer_root": {"type": "env", "key": "HEALER_ROOT"}},
            "steady-state-hypothesis": {"title": "a supervisor holds its lease", "probes": [
                {"type": "probe", "name": "supervisor alive", "tolerance": {"type": "jsonpath", "path": "$.alive", "expect": True},
                 "provider": {"type": "python", "module": "healer.ctk.probes", "func": "holder", "arguments": {"role": "supervisor"}}}]},
            "method": [
                {"type": "action", "name": "freeze dispatch", "provider": {"type": "python", "module": "healer.ctk.actions",
                                                                          "func": "freeze_dispatch"}},
                {"type": "probe", "name": "dispatcher state", "provider": {"type": "python", "module": "healer.ctk.probes",
                                                                          "func": "holder", "arguments": {"role": "dispatcher"}}},
                {"type": "action", "name": "kill the supervisor", "provider": {"type": "python", "module": "healer.ctk.actions",
                                                                              "func": "kill_supervisor"}},
                {"type": "probe", "name": "fleet health", "provider": {"type": "python", "module": "healer.ctk.probes",
                                                                      "func": "fleet_health"}}],
            "rollbacks": [{"type": "action", "name": "thaw dispatch", "provider": {"type": "python", "module": "healer.ctk.actions",
                                                                                  "func": "thaw_dispatch"}}],
        }
        f = tmp_path / "exp.json"
        f.write_text(json.dumps(exp))
        jp = tmp_path / "chaos-journal.json"
        r = subprocess.run([CHAOS, "--no-version-check", "--no-log-file", "run", "--journal-path", str(jp), "--rollback-strategy", "always", str(f)],
                           env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert jp.exists(), r.stdout[-3000:] + r.stderr[-3000:]
        j = json.loads(jp.read_text())
        assert [a["status"] for a in j["run"]] == ["succeeded"] * 4, r.stderr[-3000:]
        assert j["run"][1]["output"]["status"] == "stopped"
        assert daemons[0].wait(timeout=30) == -signal.SIGKILL
        assert j["run"][3]["output"]["tickets"] == {}
        assert [a["status"] for a in j["rollbacks"]] == ["succeeded"]
        wait_until(lambda: __import__("psutil").Process(daemons[1].pid).status() != "stopped", 30, "dispatcher thawed")
        # the steady state after: the supervisor is gone, so CTK reports a deviation, as it should
        assert j["deviated"] is True
    finally:
        for p in daemons:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
    from chaos.faults.undo import recover_leftovers

    recover_leftovers(base=tmp_path / "gd-home")  # the bare `chaos run` journaled a SIGCONT: already applied by the rollback


@pytest.mark.campaign  # real processes, minutes on a shared machine: `make campaigns` (CI runs it)
def test_chaos_toolkit_reporting_reads_healers_game_day_journal(tmp_path):
    chaosreport = pytest.importorskip("chaosreport", reason="chaostoolkit-reporting is in the dev extra")
    out = tmp_path / "gd"
    r = healer("gameday", "run", "relaunch-storm", "red-main", "--report", str(out), "--quiet", timeout=300)
    assert r.returncode == 0, r.stderr
    j = json.loads((out / "journal.json").read_text())
    import semver

    assert semver.Version.parse(j["chaoslib-version"])
    assert j["status"] == "completed" and j["deviated"] is False
    assert j["steady_states"]["before"]["probes"] and j["steady_states"]["after"]["probes"] and j["steady_states"]["during"] == []
    assert all("provider" in a["activity"] for a in j["run"] + j["steady_states"]["after"]["probes"])
    for e in j["experiments"]:
        md = chaosreport.generate_report(json.loads(json.dumps(e | {"chaoslib-version": j["chaoslib-version"]})), "markdown")
        assert e["experiment"]["title"] in md
    md = chaosreport.generate_report(j, "markdown")
    assert "game day" in md
    # a disabled run deviates but still completes, as Chaos Toolkit says it
    r = healer("gameday", "run", "relaunch-storm", "--disable", "--report", str(tmp_path / "bad"), "--quiet", timeout=300)
    bad = json.loads((tmp_path / "bad" / "journal.json").read_text())
    assert r.returncode == 1 and bad["status"] == "completed" and bad["deviated"] is True
    chaosreport.generate_report(bad, "markdown")


def test_repo_root_is_importable_for_the_extension():
    assert (REPO / "healer" / "ctk" / "actions.py").is_file()


@pytest.mark.campaign  # real processes, minutes on a shared machine: `make campaigns` (CI runs it)
def test_a_game_day_against_your_own_fleet_with_a_command_fault_and_probe(tmp_path):
    root = _fleet(tmp_path)
    assert healer("board", "add", "real work", "--root", str(root)).returncode == 0
    out = tmp_path / "rep"
    r = healer("gameday", "run", str(HERE / "experiments" / "own-fleet.yaml"), "--root", str(root), "--report", str(out),
               env={"HEALER_GAMEDAY_HOME": str(tmp_path / "gd-home")}, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (root / "undone-by-the-game-day").read_text() == "yes"  # the command fault's undo ran at the end
    s = open_store(root)
    try:
        assert [t.state for t in s.tickets()] == ["queued"]
        assert s.count_events("chaos.fault") == 1
    finally:
        s.close()
    j = json.loads((out / "journal.json").read_text())
    assert j["status"] == "completed" and not j["deviated"] and j["rollbacks"][0]["activity"]["name"] == "undo command"
    assert not any((tmp_path / "gd-home").glob("fleet-*"))
    # a fault that cannot act on a fleet healer did not build is refused before anything runs
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: not-on-your-fleet\nmode: real\nfor_root: true\nfaults: [{at: 0s, fault: red_main}]\n"
                   "expect: [{count: {kind: chaos.fault, equals: 1}}]\n")
    r = healer("gameday", "run", str(bad), "--root", str(root))
    assert r.returncode == 65 and "faults[0].fault: expected one of command" in r.stderr
