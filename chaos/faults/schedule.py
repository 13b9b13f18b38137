"""A run's fault schedule, resolved from the scenario and its seed before anything is injected.

`pick` (which tickets) and `jitter` (which moment) are drawn from a generator of their own, seeded by
the scenario's seed alone, so the schedule is the same in both worlds and in every run with that seed
(a real run's timing cannot shift it), and a scenario without them draws nothing.
"""

from __future__ import annotations

import random
from typing import Any

from chaos.scenario import match, seconds
from chaos.scenario_parts import Fault


def resolve(faults: list[Fault], tickets: list[str], seed: int) -> list[Fault]:
    """The faults as they will fire: jitter added to `at`, each `pick` made (one fault per picked ticket)."""
    rng = random.Random(f"schedule:{seed}")
    out: list[Fault] = []
    for f in faults:
        upd: dict[str, Any] = {"jitter": None, "pick": None}
        if f.jitter is not None and f.at is not None:
            upd["at"] = round(seconds(f.at) + rng.uniform(0.0, seconds(f.jitter)), 3)
        if f.pick:
            pool = sorted(t for t in tickets if match(f.target or "*", t))
            out += [f.model_copy(update={**upd, "target": t}) for t in sorted(rng.sample(pool, min(f.pick, len(pool))))]
        else:
            out.append(f.model_copy(update=upd))
    return out


def describe(faults: list[Fault]) -> list[dict[str, Any]]:
    """The deterministic part of a schedule, as journaled in the `chaos.schedule` event."""
    return [{"fault": f.fault, "at": None if f.at is None else seconds(f.at), "on_event": f.on_event, "subject": f.subject,
             "nth": f.nth, "target": f.target} for f in faults]
