"""`healer gameday validate` and `gameday run` share one loader (issue 34): validate accepts the Chaos Toolkit
experiments run accepts (it once parsed them as healer scenarios and refused every CTK key), and refuses the
same bad ones with the same one line."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import PY, healer, make_repo

EXPERIMENT = Path(__file__).parent / "experiments" / "heal-frozen-ticket.yaml"


def _env(tmp_path: Path) -> dict:
    return {"GD_STATUS_URL": "http://127.0.0.1:9/status", "GD_PYTHON": PY, "GD_TOKEN": "s3cret",
            "HEALER_GAMEDAY_HOME": str(tmp_path / "gd-home")}


def test_validate_accepts_the_chaos_toolkit_experiments_run_accepts(tmp_path):
    root = make_repo(tmp_path / "fleet")
    assert healer("init", "--root", str(root)).returncode == 0
    as_json = tmp_path / "exp.json"
    as_json.write_text(json.dumps(yaml.safe_load(EXPERIMENT.read_text())))
    r = healer("gameday", "validate", str(EXPERIMENT), str(as_json), "--root", str(root), env=_env(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and all(": ok (Chaos Toolkit experiment " in ln for ln in lines), r.stdout
    assert "3 steady-state probe(s), 4 method activities, 1 rollback(s)" in lines[0]


def test_validate_and_run_refuse_the_same_bad_experiment_with_the_same_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"title": "no provider", "description": "d", "method": [{"type": "action", "name": "x"}]}))
    v = healer("gameday", "validate", str(bad))
    r = healer("gameday", "run", str(bad), env={"HEALER_GAMEDAY_HOME": str(tmp_path / "gd-home")})
    assert v.returncode == r.returncode == 65, (v.stderr, r.stderr)
    assert v.stderr == r.stderr and v.stderr.count("\n") == 1 and "invalid Chaos Toolkit experiment" in v.stderr
    # its configuration needs $HEALER_ROOT: without --root both refuse it, naming the key
    v = healer("gameday", "validate", str(EXPERIMENT), env=_env(tmp_path))
    assert v.returncode == 65 and "HEALER_ROOT" in v.stderr and v.stderr.count("\n") == 1, v.stderr


def test_validate_refuses_a_mix_and_root_for_scenarios(tmp_path):
    scen = Path(__file__).resolve().parents[2] / "chaos" / "scenarios" / "red-main.yaml"
    r = healer("gameday", "validate", str(EXPERIMENT), str(scen))
    assert r.returncode == 64 and "got both" in r.stderr
    r = healer("gameday", "validate", str(scen), "--root", str(tmp_path))
    assert r.returncode == 64 and "--root: only for Chaos Toolkit experiments" in r.stderr
    assert healer("gameday", "validate", str(scen)).returncode == 0
