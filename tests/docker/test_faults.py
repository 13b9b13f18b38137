"""Container faults on a real engine: state read through the SDK before and after, blast
radius respected, and no paused container outliving its game day, even a SIGKILLed one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from chaos.faults import containers as cf
from healer.errors import UsageError
from healer.fleet.runtime import LaunchSpec
from tests.conftest import healer, make_repo, wait_until
from tests.docker.conftest import require_engine, state_of

pytestmark = pytest.mark.docker
require_engine()
PY = sys.executable
HANG = "import signal, time; signal.signal(signal.SIGTERM, lambda *a: exit(0)); time.sleep(300)"


@pytest.fixture
def four(runtime, fleet_label, tmp_path):
    hs = [runtime.launch(LaunchSpec(argv=[PY, "-c", HANG], cwd=str(tmp_path),
                                    labels={"fleet": fleet_label, "ticket": f"T{i}", "run": f"T{i}-01"}))
          for i in range(4)]
    return hs


def states(client, label):
    return sorted(c.status for c in client.containers.list(all=True, filters={"label": f"healer.fleet={label}"}))


def test_dry_run_lists_without_acting(dclient, fleet_label, four):
    label = f"healer.fleet={fleet_label}"
    for fn in (cf.kill, cf.pause, cf.stop, cf.restart):
        out = fn(label=label, dry_run=True, client=dclient)
        assert len(out) == 4 and all(o.dry_run and o.before == o.after == "running" for o in out)
    assert states(dclient, fleet_label) == ["running"] * 4


def test_pause_respects_the_count_and_the_seed_and_cleanup_thaws(dclient, fleet_label, four, tmp_path):
    label = f"healer.fleet={fleet_label}"
    picked = [t.id for t in cf.select(label=label, count=2, seed=7, client=dclient)]
    assert picked == [t.id for t in cf.select(label=label, count=2, seed=7, client=dclient)]  # same seed, same targets
    journal = cf.UndoJournal(tmp_path / "undo.jsonl")
    out = cf.pause(label=label, count=2, seed=7, journal=journal, client=dclient)
    assert sorted(o.id for o in out) == sorted(picked)
    assert all((o.before, o.after) == ("running", "paused") for o in out)
    assert states(dclient, fleet_label) == ["paused", "paused", "running", "running"]
    assert len(journal.pending()) == 2  # one undo per pause, written before it
    again = cf.pause(label=label, count=5, seed=1, journal=journal, client=dclient)  # only running ones are candidates
    assert len(again) == 2
    cf.cleanup(fleet_label, journal=journal, client=dclient)
    assert states(dclient, fleet_label) == ["running"] * 4
    assert journal.pending() == []


def test_kill_any_signal_stop_and_restart(dclient, fleet_label, four):
    label = f"healer.fleet={fleet_label}"
    [k] = cf.kill("TERM", label=label, count=1, seed=3, client=dclient)
    assert k.before == "running" and k.after in ("running", "exited")
    wait_until(lambda: state_of(dclient, k.id) == "exited", what="SIGTERM handled")
    assert dclient.api.inspect_container(k.id)["State"]["ExitCode"] == 0  # the agent's handler ran: it got SIGTERM
    [k9] = cf.kill(9, label=label, count=1, seed=3, client=dclient)
    assert k9.after == "exited" and dclient.api.inspect_container(k9.id)["State"]["ExitCode"] == 137
    name = next(c.name for c in dclient.containers.list(filters={"label": label}))  # one still running
    [s] = cf.stop(1, name=name, client=dclient)
    assert (s.before, s.after) == ("running", "exited")
    started = dclient.api.inspect_container(s.id)["State"]["StartedAt"]
    [r] = cf.restart(1, name=name, client=dclient)
    assert (r.before, r.after) == ("exited", "running")
    assert dclient.api.inspect_container(s.id)["State"]["StartedAt"] != started
    assert states(dclient, fleet_label) == ["exited", "exited", "running", "running"]


def test_targets_must_be_named(dclient):
    with pytest.raises(UsageError):
        cf.kill(client=dclient)
    with pytest.raises(UsageError):
        cf.parse_signal("SIGNOPE")


def test_a_killed_game_day_leaves_no_paused_container(dclient, fleet_label, four, tmp_path):
    """The game day pauses two containers (guarded), then is SIGKILLed with its whole group."""
    journal = tmp_path / "undo.jsonl"
    code = ("import sys, time\n"
            "from chaos.faults import containers as cf\n"
            f"out = cf.pause(label='healer.fleet={fleet_label}', count=2, seed=1, journal={str(journal)!r}, guard=True)\n"
            "print(len(out), flush=True)\n"
            "time.sleep(300)\n")
    gd = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert gd.stdout.readline().strip() == "2"
        assert states(dclient, fleet_label).count("paused") == 2
    finally:
        os.killpg(gd.pid, signal.SIGKILL)
        gd.wait(timeout=10)
    wait_until(lambda: "paused" not in states(dclient, fleet_label), timeout=60, what="the guard to unpause")
    wait_until(lambda: cf.UndoJournal(journal).pending() == [], what="the guard to close its undos")


@pytest.mark.long  # 18 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_cli_list_pause_dry_run_and_cleanup(dclient, tmp_path, four, fleet_label):
    label = f"healer.fleet={fleet_label}"
    r = healer("containers", "list", "--label", label, "--json")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)) == 4
    r = healer("containers", "pause", "--label", label, "--count", "1", "--dry-run", "--json")
    assert r.returncode == 0 and len(json.loads(r.stdout)) == 1 and json.loads(r.stdout)[0]["dry_run"]
    assert "paused" not in states(dclient, fleet_label)
    r = healer("containers", "kill", "--signal", "NOPE", "--label", label)
    assert r.returncode == 64 and r.stderr.count("\n") == 1 and "--signal" in r.stderr
    # a fleet: no --label means this fleet's containers; cleanup thaws them and replays the journal
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir()
    c = dclient.containers.get(four[0].container)
    r = healer("containers", "pause", "--name", c.name, "--root", str(root), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)[0]["after"] == "paused"
    assert len(cf.UndoJournal(cf.default_journal_path(root)).pending()) == 1
    r = healer("containers", "cleanup", "--root", str(root), "--json")
    assert r.returncode == 0, r.stderr
    assert state_of(dclient, c.id) == "running"
    assert cf.UndoJournal(cf.default_journal_path(root)).pending() == []
    r = healer("containers", "list", cwd=tmp_path)
    assert r.returncode == 64 and "not a healer fleet" in r.stderr


def test_inject_aims_scenario_faults_at_tickets(dclient, fleet_label, four, tmp_path):
    journal = cf.UndoJournal(tmp_path / "undo.jsonl")
    out = cf.inject("container_pause", fleet=fleet_label, target="T[12]", count=5, journal=journal, guard=False, client=dclient)
    assert sorted(o.name for o in out) == ["healer-T1-T1-01", "healer-T2-T2-01"]
    out = cf.inject("container_stop", fleet=fleet_label, target="T2", params={"timeout": 1}, client=dclient)
    assert [(o.before, o.after) for o in out] == [("paused", "exited")]
    out = cf.inject("container_kill", fleet=fleet_label, count=1, seed=0, params={"signal": "KILL"}, client=dclient)
    assert len(out) == 1 and out[0].after == "exited"
    cf.cleanup(fleet_label, journal=journal, client=dclient)
    assert "paused" not in states(dclient, fleet_label) and journal.pending() == []
    with pytest.raises(UsageError):
        cf.inject("container_explode", fleet=fleet_label, client=dclient)


def test_the_game_day_journal_undoes_pauses_of_a_killed_engine(dclient, fleet_label, four, tmp_path):
    """Same guarantee through chaos/faults/undo.py: the next game day recovers what a killed one left."""
    from chaos.faults import undo

    home = tmp_path / "gameday-home"
    code = ("import time\n"
            "from chaos.faults import containers as cf, undo\n"
            f"j = undo.UndoJournal({str(home / 'run1')!r})\n"
            f"out = cf.inject('container_pause', fleet={fleet_label!r}, count=3, seed=2, journal=j)\n"
            "print(len(out), flush=True)\n"
            "time.sleep(300)\n")
    gd = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert gd.stdout.readline().strip() == "3"
    finally:
        os.killpg(gd.pid, signal.SIGKILL)
        gd.wait(timeout=10)
    assert states(dclient, fleet_label).count("paused") == 3
    lines = undo.recover_leftovers(base=home)
    assert len(lines) == 3 and all("unpaused container" in ln for ln in lines)
    assert "paused" not in states(dclient, fleet_label)
