"""One list of faults: the registry names exactly the scenario schema's faults, holds each world's inject
function, the engines dispatch through it (no fault names in them), and the CLI prints it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.faults.registry import FAULTS, REAL, SIM
from chaos.faults.worlds import TABLES, inject, injector, undo, unsupported, worlds
from chaos.scenario_parts import Fault

ENGINES = Path(__file__).resolve().parents[2] / "chaos" / "engine"


def test_every_fault_has_an_injector_in_each_of_its_worlds():
    for f in FAULTS.values():
        assert worlds(f), f.name
        assert all(callable(injector(f, w)) for w in worlds(f)), f.name
        assert f.undone_by is None or f.undone_by in FAULTS


def test_each_worlds_table_names_only_registered_faults():
    # an injector in a world's table with no record would be a fault no scenario can name
    for world, table in TABLES.items():
        assert set(table) <= set(FAULTS), (world, set(table) - set(FAULTS))


def test_the_once_simulated_only_faults_exist_in_real_mode():
    for name in ("clock_jump", "broken_proposal", "same_commit_repush"):
        assert set(worlds(FAULTS[name])) == {SIM, REAL}, name


def test_a_fault_outside_its_world_is_not_applied_and_errs_the_game_day():
    """A fault its world cannot do did not happen: NotApplied, which the engines report `skipped` (game day `error`)."""
    from chaos.engine import apply_fault
    from chaos.faults import NotApplied

    assert unsupported("clock_jump", REAL) is None and unsupported("clock_jump", SIM) is None
    assert unsupported("pg_restart", SIM) and unsupported("container_kill", SIM) and unsupported("nope", SIM) == "unknown fault nope"
    with pytest.raises(NotApplied, match="not in the simulated world"):
        inject(SIM, object(), Fault(fault="container_kill", at=0))
    status, out, kind = apply_fault(lambda f: inject(SIM, object(), f), Fault(fault="container_kill", at=0))
    assert status == "skipped" and "not in the simulated world" in out and kind == "chaos.fault_not_applied"


def test_undo_injects_the_reversing_fault():
    seen = []

    class World:  # the registry only hands the engine to the world's function: any object will do for a spy
        pass

    from chaos.faults import sim_world

    real_fn = sim_world.INJECT["continue_agent"]
    sim_world.INJECT["continue_agent"] = lambda e, f: seen.append((f.fault, f.target)) or "ok"
    try:
        assert undo(SIM, World(), Fault(fault="stop_agent", at=0, target="T-1")) == "ok"
        assert undo(SIM, World(), Fault(fault="kill_agent", at=0)) is None
    finally:
        sim_world.INJECT["continue_agent"] = real_fn
    assert seen == [("continue_agent", "T-1")]


def test_the_engines_hold_no_fault_names():
    # dispatch goes through the registry: no `k == "red_main"` chains left in either engine
    for src in ("sim.py", "real.py"):
        text = (ENGINES / src).read_text()
        named = {n for n in FAULTS if n != "failpoint" and re.search(rf"""["']{n}["']""", text)}
        # sim's end: the registry's undo of a busy worktree left in force; real: broken_proposal is also a behaviour's name
        assert named <= {"busy_worktree", "broken_proposal"}, (src, named)


def test_gameday_list_faults():
    out = subprocess.run([sys.executable, "-m", "healer", "gameday", "list", "--faults", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {r["fault"] for r in rows} == set(FAULTS)
    assert all(r["worlds"] and r["what"] and r["undo"] for r in rows)
    by = {r["fault"]: r for r in rows}
    assert by["stop_agent"]["undone_by"] == "continue_agent" and "target" in by["stop_agent"]["params"]
    assert "params.keys" in by["alert_flood"]["params"]
    text = subprocess.run([sys.executable, "-m", "healer", "gameday", "list", "--faults"], capture_output=True, text=True,
                          timeout=120, env={**__import__("os").environ, "COLUMNS": "200"})
    assert text.returncode == 0 and "clock_jump" in text.stdout and "params" in text.stdout


def test_pg_restart_restarts_the_game_days_own_server_and_only_that():
    """`pg_restart` acts on the cluster a `hosts:` game day holds (chaos/pgday.py), `pg_ctl restart -m fast`; an
    engine with no server of its own (the SQLite real engine) has nothing to restart: not applied, never a crash."""
    from chaos.faults import NotApplied

    class Cluster:  # chaos.pgcluster.Cluster's interface: restart(mode), pid
        pid, modes = 100, []

        def restart(self, mode):
            self.modes.append(mode)
            self.pid = 101

    class Engine:
        cluster = None

    assert worlds(FAULTS["pg_restart"]) == (REAL,)
    with pytest.raises(NotApplied, match="no PostgreSQL server"):
        inject(REAL, Engine(), Fault(fault="pg_restart", at=0))
    e = Engine()
    e.cluster = Cluster()
    assert inject(REAL, e, Fault(fault="pg_restart", at=0)) == "pg_ctl restart -m fast: postmaster 100 -> 101"
    assert e.cluster.modes == ["fast"]


DOCS = Path(__file__).resolve().parents[2] / "docs" / "chaos.md"


def test_the_docs_fault_table_is_the_registrys():
    from chaos.faults.worlds import markdown

    text = DOCS.read_text()
    start = text.index("\n", text.index("<!-- the fault table")) + 1
    assert text[start:text.index("<!-- end of the fault table -->")] == markdown(), \
        "docs/chaos.md's fault table is stale: paste `python -m chaos.faults.worlds` between its markers"


def test_the_docs_real_effects_table_names_registered_faults():
    # the real world's mechanics table (docs/chaos.md "Faults on real things"): every name in its first column is a
    # fault (`stop_*`: a family of them), so a renamed or dropped fault cannot linger there
    text = DOCS.read_text()
    table = text[text.index("| fault | real effect |"):].split("\n\n")[0].splitlines()[2:]
    for row in table:
        for name in re.split(r"\s*[/,]\s*", row.split("|")[1].strip()):
            assert any(re.fullmatch(name.replace("*", ".*"), f) for f in FAULTS), (name, row)
