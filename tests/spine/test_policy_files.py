"""Shipped policy files: schema.json is current, default.yaml states the schema defaults, all validate."""

from __future__ import annotations

import json
import re

import pytest

from healer.policy import Policy, load_policy
from healer.policy.load import default_policy_path
from healer.policy.schema import json_schema
from tests.conftest import healer
from tests.spine.conftest import REPO

POLICIES = sorted((REPO / "policies").glob("*.yaml"))


def test_schema_json_is_current():
    committed = json.loads((REPO / "policies" / "schema.json").read_text())
    assert committed == json_schema(), "policies/schema.json is stale: run `.venv/bin/healer policy schema > policies/schema.json`"


def test_schema_command_prints_the_committed_schema():
    r = healer("policy", "schema")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == json.loads((REPO / "policies" / "schema.json").read_text())


def test_default_yaml_states_exactly_the_schema_defaults():
    assert default_policy_path() == REPO / "policies" / "default.yaml"
    assert load_policy(default_policy_path()) == Policy()


def test_default_yaml_has_a_comment_on_every_leaf():
    for n, line in enumerate(default_policy_path().read_text().splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        key_only = re.fullmatch(r"[\w-]+:", s)  # a section header may stand alone
        in_mapping_list = s.startswith("- {") or re.fullmatch(r"[\w-]+: \{.*\}", s)
        if key_only or in_mapping_list:
            continue
        assert "#" in line, f"default.yaml:{n}: no comment on {s!r}"


@pytest.mark.parametrize("path", POLICIES, ids=[p.name for p in POLICIES])
def test_every_shipped_policy_validates(path):
    assert isinstance(load_policy(path), Policy)


def test_validate_cli_accepts_all_shipped_policies():
    r = healer("policy", "validate", *map(str, POLICIES))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(": ok") == len(POLICIES)


def test_show_fills_defaults_and_round_trips(tmp_path):
    p = tmp_path / "small.yaml"
    p.write_text("loop:\n  max_iterations: 7\n  iteration_timeout: 1h30m\n")
    r = healer("policy", "show", str(p))
    assert r.returncode == 0, r.stderr
    assert "max_iterations: 7" in r.stdout and "iteration_timeout: 1h30m" in r.stdout and "agent_stuck: 1h30m" in r.stdout
    shown = tmp_path / "shown.yaml"
    shown.write_text(r.stdout)
    assert load_policy(shown) == load_policy(p)
    j = healer("policy", "show", str(p), "--json")
    assert json.loads(j.stdout)["loop"]["max_iterations"] == 7


def test_policy_show_inside_a_fleet_shows_its_healer_yaml(tmp_path):
    # regression: `policy show` in a fleet printed the embedded default, even when healer.yaml was broken
    from tests.conftest import make_repo

    root = make_repo(tmp_path / "fleet")
    assert healer("init", cwd=root).returncode == 0
    (root / "healer.yaml").write_text("version: 1\nloop:\n  max_iterations: 3\n")
    r = healer("policy", "show", "--json", cwd=root, env={"HEALER_ROOT": ""})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["loop"]["max_iterations"] == 3
    (root / "healer.yaml").write_text("version: 1\nloop:\n  max_iterations: many\n")
    r = healer("policy", "show", cwd=root, env={"HEALER_ROOT": ""})
    assert r.returncode == 65 and "healer.yaml:3:3: loop.max_iterations" in r.stderr
