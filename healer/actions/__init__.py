"""The remediation actions: one file per action, each a `SPEC` (healer/actions/spec.py: ActionSpec).

Everything else reads them from here: the policy's whitelist and default rate limits (healer/policy/schema.py),
the lease and applicability tables (healer/core/rules.py), the planner (healer/core/plan.py), the executor
(healer/remedy/actions.py, its handlers in healer/remedy/handlers/) and the repair agent's tools (healer/repair/server.py). To add an action:
write a file here beside the others, with its `SPEC`: it is found by its file, listed nowhere (docs/supervisor.md, "How to add an action").
"""

import importlib
import pkgutil

from healer.actions.spec import (
    REASON,
    Abort,
    ActionSpec,
    ByFinding,
    Handler,
    Leases,
    Names,
    Param,
    Refuse,
    Step,
    Target,
    Tool,
    UnknownAction,
    get,
    names,
    register,
    registered,
    specs,
    tool,
    unregister,
)

# The order of the whitelist policies/default.yaml shows, for the actions that shipped with it; any other file of this
# package registers after them, by name. Every file here is an action: a newcomer writes one and lists it nowhere.
_SHOWN_FIRST = ("close_dead_ticket", "drop_label", "requeue_ticket", "unblock_ticket", "quarantine_file", "remove_worktree",
                "resume_agent", "stop_agent", "escalate", "pause_dispatch", "resume_dispatch", "notify",
                "snapshot_worktree", "stop_adopted", "restart_adopted")


def _files() -> list[str]:
    found = [m.name for m in pkgutil.iter_modules(__path__) if m.name != "spec" and not m.name.startswith("_")]
    return sorted(found, key=lambda n: (_SHOWN_FIRST.index(n) if n in _SHOWN_FIRST else len(_SHOWN_FIRST), n))


for _name in _files():
    register(importlib.import_module(f"{__name__}.{_name}").SPEC)

BUILTIN = names()  # the actions of the files above (healer/policy/cache.py keys on any other)
ACTIONS = Names()  # every registered action, live (a spec registered later is in it)

__all__ = ["ACTIONS", "BUILTIN", "REASON", "ActionSpec", "Abort", "ByFinding", "Handler", "Leases", "Names", "Param", "Refuse",
           "Step", "Target", "Tool", "UnknownAction", "get", "names", "register", "registered", "specs", "tool", "unregister"]
