"""The install story, as an operator lives it: build the wheel, install it into a fresh virtualenv
OUTSIDE the checkout, then use it there (`healer --version`, `init`, a shipped game day, a Chaos Toolkit
experiment by `healer gameday run` and by `chaos run` with healer's extension, the pytest plugin).

A campaign: creating a virtualenv and installing every dependency takes minutes on a shared machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO, make_repo

pytestmark = [pytest.mark.campaign, pytest.mark.timeout(2400)]


def _run(cmd, cwd, env=None, timeout=900):
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                       timeout=timeout)
    return r


def test_wheel_installs_and_works_outside_the_checkout(tmp_path):
    dist = tmp_path / "dist"
    r = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, REPO], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    wheel = next(dist.glob("fleet_healer-*.whl"))
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", venv], tmp_path).returncode == 0
    py, bindir = venv / "bin" / "python", venv / "bin"
    r = _run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{wheel}[dev]"], tmp_path, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": "", "HEALER_GAMEDAY_HOME": str(tmp_path / "gd-home")}
    work = tmp_path / "elsewhere"
    fleet = make_repo(work / "my-repo")

    r = _run([bindir / "healer", "--version"], work, env)
    assert r.returncode == 0 and r.stdout.startswith("healer "), r.stderr
    where = _run([py, "-c", "import healer, chaos; print(healer.__file__); print(chaos.__file__)"], work, env).stdout
    assert str(REPO) not in where and str(venv) in where  # the installed copy, not the checkout

    assert _run([bindir / "healer", "init", "--root", fleet], work, env).returncode == 0
    assert (fleet / "healer.yaml").read_bytes() == (REPO / "policies" / "default.yaml").read_bytes()  # commented, not a dump
    r = _run([bindir / "healer", "gameday", "run", "red-main", "--quiet", "--report", tmp_path / "gd"], work, env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert 5_000 < (tmp_path / "gd" / "report.html").stat().st_size <= 1_000_000

    exp = {"version": "1.0.0", "title": "fleet stays healthy", "description": "from the wheel",
           "steady-state-hypothesis": {"title": "healthy", "probes": [
               {"type": "probe", "name": "no findings", "tolerance": True,
                "provider": {"type": "python", "module": "healer.ctk.probes", "func": "fleet_healthy"}}]},
           "method": [{"type": "action", "name": "command fault", "provider": {
               "type": "python", "module": "healer.ctk.actions", "func": "run_command",
               "arguments": {"command": ["touch", str(fleet / "fault")], "undo": ["rm", "-f", str(fleet / "fault")]}}}],
           "rollbacks": [{"type": "action", "name": "rollback mark", "provider": {
               "type": "process", "path": "touch", "arguments": str(fleet / "rolled-back")}}]}
    f = work / "exp.json"
    f.write_text(json.dumps(exp))
    r = _run([bindir / "healer", "gameday", "run", f, "--root", fleet, "--report", tmp_path / "ctk"], work, env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert (fleet / "rolled-back").exists() and not (fleet / "fault").exists()
    j = json.loads((tmp_path / "ctk" / "journal.json").read_text())
    r = _run([py, "-c", "import json,sys,chaosreport; print(len(chaosreport.generate_report(json.load(open(sys.argv[1])), 'markdown')))",
              tmp_path / "ctk" / "journal.json"], work, env)
    assert r.returncode == 0 and int(r.stdout) > 100, r.stderr[-2000:]
    assert j["status"] == "completed" and j["deviated"] is False

    r = _run([bindir / "chaos", "--no-version-check", "--no-log-file", "run", "--journal-path", tmp_path / "cj.json", f],
             work, {**env, "HEALER_ROOT": str(fleet)})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert json.loads((tmp_path / "cj.json").read_text())["run"][0]["status"] == "succeeded"

    scen = work / "gamedays"
    scen.mkdir()
    shutil.copy(REPO / "chaos" / "scenarios" / "relaunch-storm.yaml", scen)
    r = _run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", scen, "--gameday-report", tmp_path / "pt"], work, env)
    assert r.returncode == 0 and " passed" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    assert (tmp_path / "pt" / "report.html").exists()
    # the bare `chaos run` journaled its own undo; it ran nothing that needs undoing once its owner is gone
    _run([bindir / "healer", "gameday", "clean"], work, env)
