"""Game days for your own fleet (issue 41 item 3): `for_root: true` scenarios, shipped in chaos/scenarios/root/, run
only with --root; the others are refused with one line (64); expectations name real tickets or globs."""

from __future__ import annotations

import pytest

from chaos.scenario import ROOT_DIR, load
from healer.errors import InvalidInput
from tests.conftest import healer, make_repo

MINE = """\
name: mine
mode: real
for_root: true
tick: 1s
duration: 30s
faults: [{at: 0s, fault: command, params: {command: ["{python}", -c, "pass"]}}]
expect:
  - count: {kind: chaos.fault, subject: %s, min: 0}
"""


def _fleet(tmp_path):
    root = make_repo(tmp_path / "fleet")
    assert healer("init", "--root", str(root)).returncode == 0
    assert healer("board", "add", "real work", "--root", str(root)).returncode == 0  # T-1
    return root


def test_shipped_root_scenarios_validate_and_are_for_root():
    files = sorted(ROOT_DIR.glob("*.yaml"))
    assert files, "no game day for your own fleet is shipped"
    for f in files:
        assert load(f).for_root, f


@pytest.mark.parametrize("text, where", [
    ("name: x\nmode: real\nfor_root: true\nfleet: {tickets: [{id: T-1}]}\nexpect: [{invariant: intents_settled}]\n",
     ":4:1: fleet: expected no fleet.tickets"),
    ("name: x\nmode: real\nfor_root: true\nfaults: [{at: 0s, fault: red_main}]\nexpect: [{invariant: intents_settled}]\n",
     "faults[0].fault: expected one of kill_supervisor, kill_dispatcher, frozen_dispatch, thaw_dispatch, failpoint, command"),
    ("name: x\nfor_root: true\nexpect: [{invariant: intents_settled}]\n", "for_root: expected mode: real"),
])
def test_a_for_root_scenario_is_validated_as_one(tmp_path, text, where):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    with pytest.raises(InvalidInput) as e:
        load(p)
    assert where in e.value.lines[0]


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_scenarios_not_meant_for_root_are_refused_and_for_root_ones_need_it(tmp_path):
    root = _fleet(tmp_path)
    r = healer("gameday", "run", "relaunch-storm", "--root", str(root), "--quiet")
    assert r.returncode == 64 and "relaunch-storm.yaml: not meant for --root" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = healer("gameday", "run", "stray-file", "--quiet")
    assert r.returncode == 64 and "meant for your own fleet (for_root: true); run it with --root FLEET" in r.stderr


def test_an_expectation_naming_a_ticket_the_fleet_has_not_got_is_refused_before_any_fault(tmp_path):
    root = _fleet(tmp_path)
    p = tmp_path / "mine.yaml"
    p.write_text(MINE % "T-9")
    r = healer("gameday", "run", str(p), "--root", str(root), "--quiet")
    assert r.returncode == 65 and "expect[0].count.subject: names ticket T-9, which the fleet has not got" in r.stderr
    assert "chaos.fault" not in healer("journal", "--root", str(root), "-n", "-1").stdout


@pytest.mark.long  # 5 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_stray_file_game_day_heals_your_fleet_from_the_package(tmp_path):
    root = _fleet(tmp_path)
    rep = tmp_path / "rep"
    r = healer("gameday", "run", "stray-file", "--root", str(root), "--quiet", "--report", str(rep),
               env={"HEALER_GAMEDAY_HOME": str(tmp_path / "gd-home")}, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "fired: quarantine-unknown-file 1x" in r.stdout
    assert not (root / ".healer" / "worktrees" / "gameday-stray-file.txt").exists()  # moved, never deleted:
    assert "gameday-stray-file.txt" in healer("quarantine", "list", "--root", str(root)).stdout
    assert healer("board", "list", "--root", str(root), "--json").stdout.count('"queued"') == 1  # T-1 untouched


@pytest.mark.long  # ~40-60 s: nine real `healer supervise --once` children, seven of them SIGKILLed (2026-12-07)
def test_crash_mid_quarantine_on_your_fleet_every_failpoint_hit_every_file_quarantined_once(tmp_path):
    """The shipped crash game day for your fleet: the supervisor SIGKILLed at each remediation and quarantine
    failpoint in turn while it quarantines eight stray files; each next tick recovers from the journal."""
    root = _fleet(tmp_path)
    rep = tmp_path / "rep"
    r = healer("gameday", "run", "crash-mid-quarantine", "--root", str(root), "--quiet", "--report", str(rep),
               env={"HEALER_GAMEDAY_HOME": str(tmp_path / "gd-home")}, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    left = sorted(p.name for p in (root / ".healer" / "worktrees").glob("gameday-crash-*"))
    assert left == []  # every one moved into quarantine, none deleted:
    listed = healer("quarantine", "list", "--root", str(root)).stdout
    assert all(f"gameday-crash-{i}.txt" in listed for i in range(8))
    crashes = healer("journal", "--root", str(root), "-n", "-1", "--kind", "chaos.crash").stdout
    assert crashes.count("SIGKILL") == 7, crashes  # remedy.* (4) and quarantine.* (3), each once
    assert healer("board", "list", "--root", str(root), "--json").stdout.count('"queued"') == 1  # T-1 untouched


@pytest.mark.long  # 7 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_failpoint_glob_that_names_no_supervisor_failpoint_is_an_error_not_a_silent_pass(tmp_path):
    root = _fleet(tmp_path)
    p = tmp_path / "fp.yaml"
    p.write_text(MINE.replace("faults: [", "faults: [{at: 0s, fault: failpoint, failpoint: 'dispatch.*', action: kill}, ")
                 .replace("subject: %s, ", ""))
    r = healer("gameday", "run", str(p), "--root", str(root), "--quiet", env={"HEALER_GAMEDAY_HOME": str(tmp_path / "gd")},
               timeout=120)
    assert r.returncode != 0 and "no supervisor-side failpoint matches 'dispatch.*'" in r.stdout + r.stderr, r.stdout + r.stderr
