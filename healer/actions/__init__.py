"""The remediation actions: one file per action, each a `SPEC` (healer/actions/spec.py: ActionSpec).

Everything else reads them from here: the policy's whitelist and default rate limits (healer/policy/schema.py),
the lease and applicability tables (healer/core/rules.py), the planner (healer/core/plan.py), the executor
(healer/remedy/actions.py, its handlers in healer/remedy/handlers/) and the repair agent's tools (healer/repair/server.py). To add an action:
write a file here beside the others and list it below (docs/supervisor.md, "How to add an action").
"""

from healer.actions import (
    close_dead_ticket,
    drop_label,
    escalate,
    notify,
    pause_dispatch,
    quarantine_file,
    remove_worktree,
    requeue_ticket,
    resume_agent,
    resume_dispatch,
    stop_agent,
    unblock_ticket,
)
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
    unregister,
)

# the whitelist's order (policies/default.yaml lists them so)
for _m in (close_dead_ticket, drop_label, requeue_ticket, unblock_ticket, quarantine_file, remove_worktree,
           resume_agent, stop_agent, escalate, pause_dispatch, resume_dispatch, notify):
    register(_m.SPEC)

BUILTIN = names()  # the actions of the files above (healer/policy/cache.py keys on any other)
ACTIONS = Names()  # every registered action, live (a spec registered later is in it)

__all__ = ["ACTIONS", "BUILTIN", "REASON", "ActionSpec", "Abort", "ByFinding", "Handler", "Leases", "Names", "Param", "Refuse",
           "Step", "Target", "Tool", "UnknownAction", "get", "names", "register", "registered", "specs", "unregister"]
