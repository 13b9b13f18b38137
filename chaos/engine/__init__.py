"""Game-day engines: `simulated` (chaos/engine/sim.py) and `real` (chaos/engine/real.py), and the storm and
database game days (chaos/engine/simstorm.py, chaos/storm.py, chaos/pgday.py).

`run(scenario, workdir, ...)` picks the engine from the scenario's mode, runs it, and
returns a `Result`: the checks, the activities (faults and probes, Chaos Toolkit style),
the rollbacks (every fault undone) and a timeline for the report. What the engines share is
chaos/engine/base.py (re-exported here).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import traceback
from pathlib import Path
from typing import Any

# the modules, not their engines: chaos.storm and chaos.pgday import chaos.engine.base, which runs this __init__ first
# (`import chaos.storm` alone comes back here while chaos.storm is half made; tests/spine/test_import_cycles.py)
from chaos import pgday, storm
from chaos import workdir as kept
from chaos.engine.base import (
    Activity,
    Engine,
    EngineFactory,
    Result,
    apply_fault,
    fault_errors,
    finish,
    flag_vacuous,
    never_fired,
    timeline_from,
)
from chaos.engine.real import RealEngine
from chaos.engine.sim import SimEngine
from chaos.engine.simstorm import SimStormEngine
from chaos.faults import undo
from chaos.scenario import Scenario
from healer import switches
from healer.clock import Clock, system

# the five engines are imported at module level above (no circle: they import chaos.engine.base, not this package). Measured with
# `python -X importtime -c "import chaos.engine"` on this loaded 2-core machine: they are ~45% of the package's
# import (real.py with psutil the most), paid once by `healer gameday` before a run of seconds to hours: kept here.
__all__ = ["Activity", "Engine", "EngineFactory", "Result", "apply_fault", "fault_errors", "finish", "flag_vacuous",
           "engine_for", "never_fired", "run", "timeline_from"]


def engine_for(scenario: Scenario) -> EngineFactory:
    """The runner of a scenario, by its mode: the simulated world (with a restart storm or not), a storm of real
    restarts, a database game day (`hosts:`), or the real world."""
    if scenario.mode == "simulated":
        return SimStormEngine if scenario.storm is not None else SimEngine
    if scenario.storm is not None:
        return storm.StormEngine
    return pgday.PgDayEngine if scenario.hosts is not None else RealEngine


def run(scenario: Scenario, workdir: str | Path | None = None, *, seed: int | None = None, disabled: bool = False,
        overrides: dict | None = None, progress=None, clock: Clock | None = None, keep: bool | None = None) -> Result:
    """Run one scenario in `workdir` (a fresh temp dir by default) and check it.

    A temp dir of its own is removed at the end unless `keep` (a given `workdir` is the caller's, kept unless
    keep=False; it must be new, empty or an earlier game day's, which is moved aside: chaos/workdir.py). `disable:`'s product switches are set in this process's environment for the run, so every
    child (supervisor ticks, the dispatcher) inherits them; the environment is restored after."""
    owned = workdir is None
    wd = Path(tempfile.mkdtemp(prefix=f"gameday-{scenario.name}-")) if owned else Path(workdir)
    if owned:
        undo.claim(wd)  # a SIGKILLed run's folder is then known dead to `healer gameday clean`
    moved = None if owned else kept.take(wd)  # a folder not healer's is refused, an earlier game day's moved aside
    keep = (not owned) if keep is None else keep
    clock = clock or system()
    make = engine_for(scenario)
    started = clock.now()
    saved = os.environ.get(switches.ENV)
    off = scenario.switches_off(disabled)
    if off:
        os.environ[switches.ENV] = switches.env_value(off)
    eng: Engine | None = None
    try:
        eng = make(scenario, wd, seed=seed, disabled=disabled, overrides=overrides, progress=progress, wall=clock)
        result = eng.run()
    except Exception as e:  # noqa: BLE001 - an engine crash is a failed game day, reported, not a traceback
        if eng is not None:
            with contextlib.suppress(Exception):  # best effort: the crash is what gets reported
                eng.abort()  # a simulated world's armed failpoints would fire in this process's later runs

        result = Result(scenario, "error", error=f"{type(e).__name__}: {e}", seed=scenario.seed if seed is None else seed,
                        disabled=disabled, workdir=str(wd))
        result.stats["traceback"] = traceback.format_exc(limit=8)
    except KeyboardInterrupt:  # Ctrl-C: undo what the run did, leave no work folder of ours, then stop (exit 4)
        if eng is not None:
            with contextlib.suppress(Exception):
                eng.abort()
        j = getattr(eng, "undo", None)
        if isinstance(j, undo.UndoJournal):
            with contextlib.suppress(Exception):
                j.undo_all()
        if owned and not keep:
            shutil.rmtree(wd, ignore_errors=True)
        raise
    finally:
        if off:
            if saved is None:
                os.environ.pop(switches.ENV, None)
            else:
                os.environ[switches.ENV] = saved
        _drop_settled_journal(eng)
    result.started = result.started or started
    result.ended = clock.now()
    result.workdir = str(wd)
    result.kept = keep
    result.moved_aside = str(moved) if moved else ""
    if not keep:
        shutil.rmtree(wd, ignore_errors=True)
    return result


def _drop_settled_journal(eng: Any) -> None:
    """An engine's undo journal with nothing left to undo is removed (with the owner folder once empty):
    a passing game day leaves nothing in the temp folder."""
    j = getattr(eng, "undo", None)
    if isinstance(j, undo.UndoJournal):
        j.finish()  # a no-op when the engine finished it already, or when something is left to undo
