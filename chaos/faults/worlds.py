"""The registry's faults joined to each world's injectors: which worlds have a fault, and injecting it.

A fault's injector in a world is its spec's own (`FaultSpec.inject`, a fault that brings its own: a plug-in, a
test's toy) or the world's table (chaos/faults/sim_world.py, real_world.py for the built-in ones). The engines hold
no list of faults: they call `inject(world, engine, fault)` (and `undo(...)` at the end for a fault left in force),
the engine being the world's `World` (chaos/faults/world.py). Both engines refuse (with the same message) a fault
their world does not have.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from chaos.faults import NotApplied, real_world, sim_world
from chaos.faults.registry import FAULTS, REAL, SIM, WORLDS, FaultSpec
from chaos.scenario_parts import Fault

# world -> the built-in faults it injects; each injector takes its world's interface (chaos/faults/world.py)
TABLES: Mapping[str, Mapping[str, Callable[..., str]]] = {SIM: sim_world.INJECT, REAL: real_world.INJECT}
__all__ = ["REAL", "SIM", "inject", "injector", "markdown", "rows", "undo", "unsupported", "worlds"]


def injector(s: FaultSpec, world: str) -> Callable[..., str] | None:
    return s.inject.get(world) or TABLES.get(world, {}).get(s.name)


def worlds(s: FaultSpec) -> tuple[str, ...]:
    return tuple(w for w in WORLDS if injector(s, w) is not None)


def unsupported(name: str, world: str) -> str | None:
    """Why `world` cannot inject `name` (reported as the activity's output, never a crash), or None."""
    f = FAULTS.get(name)
    if f is None:
        return f"unknown fault {name}"
    if world not in worlds(f):
        return f"{name}: not in the {world} world (only {', '.join(worlds(f))}); ignored"
    return None


def inject(world: str, engine: Any, fault: Fault) -> str:
    """Inject `fault` into `engine`'s world: one line saying what happened. Raises NotApplied when nothing did."""
    why = unsupported(fault.fault, world)
    if why:
        raise NotApplied(why)
    fn = injector(FAULTS[fault.fault], world)
    assert fn is not None
    return fn(engine, fault)


def undo(world: str, engine: Any, fault: Fault) -> str | None:
    """Reverse `fault` by injecting the fault that undoes it (same target), or None when none does."""
    s = FAULTS.get(fault.fault)
    if s is None or s.undone_by is None or unsupported(s.undone_by, world):
        return None
    return inject(world, engine, fault.model_copy(update={"fault": s.undone_by}))


def rows() -> list[dict[str, Any]]:
    """The table `healer gameday list --faults` prints."""
    return [{"fault": f.name, "worlds": list(worlds(f)), "params": f.fields, "what": f.what, "undo": f.undo,
             "undone_by": f.undone_by} for f in FAULTS.values()]


def markdown() -> str:
    """The fault table of docs/chaos.md (a test keeps the doc equal to it): `python -m chaos.faults.worlds`."""
    out = ["| fault | worlds | fields and params | what it does | undone by |", "|---|---|---|---|---|"]
    for f in FAULTS.values():
        ws = ", ".join("sim" if w == SIM else w for w in worlds(f))
        params = ", ".join(f"`{p}`" + (f" ({f.params[p[7:]]})" if p.startswith("params.") else "") for p in f.fields)
        out.append(f"| `{f.name}` | {ws} | {params or '-'} | {f.what.replace('|', '/')} | {f.undo} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
