"""Scenario files: located errors like policies, overrides, the CLI's exit codes."""

from __future__ import annotations

import json

import pytest

from chaos.scenario import load, parse_override
from healer.errors import InvalidInput
from tests.conftest import healer


def test_located_error_for_a_bad_key(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\nmode: simulated\nexpect:\n  - count: {kind: a, max: 1}\nfaults:\n  - {fault: no_such_fault, at: 1m}\n")
    with pytest.raises(InvalidInput) as e:
        load(p)
    line = e.value.lines[0]
    assert line.startswith(f"{p}:6:") and "faults[0].fault" in line and "no_such_fault" in line


def test_two_checkers_in_one_expectation_is_an_error(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\nexpect:\n  - {count: {kind: a, max: 1}, never: {kind: b}}\n")
    with pytest.raises(InvalidInput) as e:
        load(p)
    assert "exactly one checker" in e.value.lines[0]


def test_policy_override_is_validated_as_a_policy(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\noverrides: {retry: {max_launches: -1}}\nexpect:\n  - {event: {kind: a}}\n")
    with pytest.raises(InvalidInput) as e:
        load(p)
    assert "retry.max_launches" in e.value.lines[0]


def test_parse_override():
    assert parse_override("retry.max_launches=9") == {"retry": {"max_launches": 9}}
    with pytest.raises(InvalidInput):
        parse_override("nonsense")


@pytest.mark.long  # 6 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_cli_list_and_run_with_reports(tmp_path):
    r = healer("gameday", "list", "--json")
    assert r.returncode == 0, r.stderr
    names = {s["name"] for s in json.loads(r.stdout)}
    assert {"relaunch-storm", "red-main"} <= names
    r = healer("gameday", "run", "stuck-review-label", "--quiet", "--report", str(tmp_path / "rep"), "--junit", str(tmp_path / "j.xml"))
    assert r.returncode == 0, r.stdout + r.stderr
    j = json.loads((tmp_path / "rep" / "journal.json").read_text())
    assert j["status"] == "completed" and j["deviated"] is False and j["run"] and "steady_states" in j
    assert "## stuck-review-label" in (tmp_path / "rep" / "report.md").read_text()
    assert "<testcase" in (tmp_path / "j.xml").read_text()


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_cli_run_disabled_fails_with_exit_1(tmp_path):
    r = healer("gameday", "run", "stuck-review-label", "--quiet", "--disable", "--junit", str(tmp_path / "j.xml"))
    assert r.returncode == 1
    assert "12 labels dropped" in (tmp_path / "j.xml").read_text()


def test_cli_bad_scenario_is_exit_65(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: [\n")
    r = healer("gameday", "run", str(p))
    assert r.returncode == 65 and "Traceback" not in r.stderr and str(p) in r.stderr


@pytest.mark.long  # 5 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_cli_run_chaos_scenarios_path_from_any_folder(tmp_path):
    # regression: the README's `healer gameday run chaos/scenarios/...` failed (65) outside the project folder
    r = healer("gameday", "run", "chaos/scenarios/zombie-ticket.yaml", "--quiet", "--junit", str(tmp_path / "j.xml"),
               cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert 'name="zombie-ticket"' in (tmp_path / "j.xml").read_text()
    r = healer("gameday", "run", "chaos/scenarios/no-such.yaml", cwd=tmp_path)
    assert r.returncode == 65 and "no such scenario" in r.stderr


@pytest.mark.long  # 5 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_cli_replay_takes_a_scenario_name_like_run(tmp_path):
    # regression: `healer gameday replay --seed N zombie-ticket` (as docs/chaos.md writes it) was exit 65
    r = healer("gameday", "replay", "--seed", "3", "zombie-ticket", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    r = healer("gameday", "replay", "--seed", "3", "no-such-scenario", cwd=tmp_path)
    assert r.returncode == 65 and "no such scenario" in r.stderr and "Traceback" not in r.stderr


def test_cli_bad_override_is_exit_65_not_a_failed_game_day(tmp_path):
    # regression: `-o loop.nokey=3` ran the scenario, which errored, and exited 1 as if an expectation broke
    r = healer("gameday", "run", "zombie-ticket", "--quiet", "-o", "loop.nokey=3", "--junit", str(tmp_path / "j.xml"))
    assert r.returncode == 65, r.stdout + r.stderr
    assert "loop.nokey" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "j.xml").exists()


@pytest.mark.long  # 10 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_cli_unusable_report_or_junit_path_is_64_before_running(tmp_path):
    # regression: a file as --report or a folder as --junit ran the game day, then died with exit 70
    f = tmp_path / "afile"
    f.write_text("x")
    for args in (["--report", str(f)], ["--junit", str(tmp_path)], ["--junit", str(f / "j.xml")]):
        r = healer("gameday", "run", "zombie-ticket", "--quiet", *args)
        assert r.returncode == 64, (args, r.stdout + r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr and "PASS" not in r.stdout
    r = healer("gameday", "replay", "--seed", "1", "zombie-ticket", "--report", str(f))
    assert r.returncode == 64 and "expected a folder" in r.stderr
