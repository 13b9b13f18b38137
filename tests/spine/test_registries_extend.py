"""A newcomer's action and fault are their spec alone (issue 42): no closed list beside a registry.

A toy remediation action (`reset_stale_worktree`) and a toy fault (`corrupt_index`), declared in this file and
registered for each test's duration only, are accepted by every consumer of the registries with no other file of
the project changed: the policy schema, the rules' tables and the planner, the executor's handlers, the repair
agent's MCP tools (server, launcher's prompt, the built-in agent's plan) and the scenario validator. docs/spine.md,
"Adding an action or a fault", lists the files a newcomer touches; this test is what keeps that list short.
"""

from __future__ import annotations

import anyio
import pytest

from chaos import explore, scenario
from chaos.faults.registry import FAULTS, REAL, SIM, FaultSpec, registered
from chaos.faults.worlds import rows
from healer import actions
from healer.actions import ActionSpec, Handler, Step, Target, Tool
from healer.clock import VirtualClock
from healer.core import decide
from healer.core.model import Memory, Snapshot
from healer.core.rules import APPLICABLE, LEASE
from healer.errors import InvalidInput
from healer.policy.load import validate_text
from healer.policy.schema import Policy
from healer.remedy.actions import handler
from healer.repair import builtin, launcher
from healer.repair.server import TOOLS, RepairTools, build_server
from healer.store import open_store
from tests.conftest import make_repo
from tests.synth import T0, ticket, worktree

# -- the toy action: one spec, its pure planning and its shell half ------------------------------------


def _plan(s: Step):
    return [s.action(s.finding.subject, path=s.finding.subject)]


def _resolve(ctx, subject: str, params: dict) -> Target:
    return Target("", subject, params)


def _apply(ctx, t: Target, intent: int) -> dict:
    return {"reset": t.subject}


RESET = ActionSpec(
    name="reset_stale_worktree",
    summary="reset an orphan worktree to its branch's head (a toy)",
    lease="subject",
    answers=frozenset({"orphan_worktree"}),
    plan=_plan,
    handler=Handler(_resolve, lambda ctx, t: None, _apply, lambda ctx, t: True),
    rate_limit=(3, "1h"),
    tool=Tool("Reset orphan worktrees (a toy of tests/spine/test_registries_extend.py).", subjects="paths",
              fixes=frozenset({"orphan_worktree"}), rank=55, hint="stale worktrees"),
)

POLICY = """\
version: 1
rules:
  - {id: reset-stale, when: orphan_worktree, do: [reset_stale_worktree]}
"""

# -- the toy fault: one spec; `main` names the repository, not a ticket -----------------------------


def _corrupt(e, f) -> str:
    return "index corrupted (a toy)"


CORRUPT = FaultSpec("corrupt_index", "garbage in the target's .git/index (a toy)", "-", ("target",),
                    other_targets=("main",), inject={SIM: _corrupt, REAL: _corrupt})

SCENARIO = """\
name: toy-corrupt-index
description: a toy fault registered from one spec
fleet:
  tickets: [{id: Y-1, behaviour: succeeds}]
faults:
  - {at: 0s, fault: corrupt_index, target: main}
  - {at: 1m, fault: corrupt_index, target: Y-1}
expect:
  - {name: Y-1 done, ticket_states: {Y-1: [done]}}
"""


def test_a_toy_action_is_accepted_by_the_policy_the_rules_the_planner_the_executor_and_the_repair_agent(tmp_path):
    with actions.registered(RESET):
        pol = validate_text(POLICY, "healer.yaml")  # the policy schema: a rule's `do` and the whitelist
        assert "reset_stale_worktree" in pol.remediation.allowed
        assert pol.remediation.rate_limits["reset_stale_worktree"].count == 3
        assert "reset_stale_worktree" in APPLICABLE["orphan_worktree"] and LEASE["reset_stale_worktree"] == "subject"
        snap = Snapshot(now=T0 + 86_400, tickets=(ticket("T-1", "done"),), worktrees=(worktree("w/T-1", "T-1", at=T0),))
        d = decide(snap, pol, Memory())  # the planner
        assert [(a.action, a.subject) for a in d.actions] == [("reset_stale_worktree", "w/T-1")]
        assert handler("reset_stale_worktree") is RESET.handler  # the executor
        # the repair agent: the server offers it, the launcher's prompt names it, the built-in agent plans it
        assert "reset_stale_worktree" in TOOLS and "reset_stale_worktree for stale worktrees" in launcher.safe_tools()
        assert builtin.fixes()["orphan_worktree"] == "reset_stale_worktree"
        order = builtin.order()
        assert order.index("quarantine_file") < order.index("reset_stale_worktree") < order.index("remove_worktree")
        calls, _left = builtin.plan([{"kind": "orphan_worktree", "subject": "/f/w/T-1", "status": "firing"}])
        assert calls == [("reset_stale_worktree", {"paths": ["/f/w/T-1"]})]
        root = make_repo(tmp_path / "fleet")
        (root / ".healer").mkdir(exist_ok=True)
        clock = VirtualClock()
        store = open_store(root, clock)
        try:
            listed = anyio.run(_listed, build_server(RepairTools(root, store, Policy(), clock, run_id="R-toy")))
        finally:
            store.close()
        assert listed["reset_stale_worktree"].input_schema["required"] == ["paths"]
    assert "reset_stale_worktree" not in TOOLS and "reset_stale_worktree" not in builtin.order()
    assert builtin.fixes()["orphan_worktree"] == "remove_worktree"


async def _listed(server) -> dict:
    from mcp.client.client import Client  # lazy: the MCP client is this test's only, 150 ms

    async with Client(server) as c:
        return {t.name: t for t in (await c.list_tools()).tools}


def test_a_toy_fault_is_accepted_by_the_scenario_validator_the_worlds_and_the_explorer(tmp_path):
    path = tmp_path / "toy.yaml"
    path.write_text(SCENARIO)
    with registered(CORRUPT):
        sc = scenario.load(path)  # `main` is no ticket of the fleet, and no problem: the spec says so
        assert [(f.fault, f.target) for f in sc.faults] == [("corrupt_index", "main"), ("corrupt_index", "Y-1")]
        assert any(r["fault"] == "corrupt_index" and r["worlds"] == [SIM, REAL] for r in rows())
        assert "corrupt_index" not in explore.timed_faults()  # no `explore=`: not drawn
        path.write_text(SCENARIO.replace("target: Y-1", "target: Z-9"))
        with pytest.raises(InvalidInput) as e:  # while a ticket target is still checked
            scenario.load(path)
        assert "faults[1].target" in str(e.value) and "Z-9" in str(e.value)
    assert "corrupt_index" not in FAULTS
