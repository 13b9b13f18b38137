"""An operator steers the fleet from the console (docs/console.md) during a game day: the `operator` fault.

It calls the console's own entry point, `Steering.run` (healer/console/steer.py), with the world's store, policy,
clock and runtime, as the console's POST does: the registered action runs the executor's one path (whitelist,
refusals, intent journal, preconditions on fresh state, verification) under the actor `operator:gameday`. What
the steer answered (done, refused, aborted, failed) is the fault's output line; healer's own events are the
evidence the scenario's expectations read.
"""

from __future__ import annotations

import fnmatch

from chaos.faults import NotApplied
from chaos.faults.world import SimWorld
from chaos.scenario_parts import Fault

ACTOR = "operator:gameday"


def _subject(e: SimWorld, f: Fault, action: str) -> str:
    """What the steer names: the target ticket; for `ack`, the key of the newest page matching `params.page`."""
    if action != "ack":
        if not f.target:
            raise NotApplied(f"operator {action}: names its ticket in `target`")
        return f.target
    pat = f.params.get("page") or "*"
    keys = [ev.subject for ev in e.store.events(kinds=["notify.sent"]) if fnmatch.fnmatchcase(ev.subject or "", pat)]
    if not keys:
        raise NotApplied(f"operator ack: no page sent under a key matching {pat!r}")
    return keys[-1]


def sim_operator(e: SimWorld, f: Fault) -> str:
    from healer.console.steer import STEERS, Steering  # lazy: the console's steering, for this fault only, 1 ms

    action = str(f.params["action"])
    if action not in STEERS:
        raise NotApplied(f"operator: no steering action {action!r}; the known ones are {', '.join(STEERS)}")
    subject = _subject(e, f, action)
    out = Steering(e.root, e.store, e.policy, e.clock, e.runtime, ACTOR).run(action, subject)
    reason = f" ({out['reason']})" if out.get("reason") else ""
    return f"operator {action} {out['subject'] or subject}: {out['status']}{reason}"


SIM = {"operator": sim_operator}
