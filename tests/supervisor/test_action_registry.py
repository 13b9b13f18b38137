"""The action registry (issue 35): one ActionSpec per remediation action, and everything else read from it.

The first test is the acceptance: a toy action, declared once below and registered for the test's duration (no
other file of the project knows it), is validated in a policy, planned by the pure core for its finding, executed
by the executor, rate-limited, and offered to the repair agent by the MCP server, through a real MCP client.
The others check what is derived from the registry against what ships (policies/, the tables the rules used to
keep by hand)."""

from __future__ import annotations

import json

import anyio
import pytest
import yaml

from healer import actions
from healer.actions import ActionSpec, Handler, Step, Target, Tool
from healer.core import decide
from healer.core.model import Memory, PlannedAction, Snapshot
from healer.errors import InvalidInput, NotFound
from healer.policy.load import validate_text
from healer.remedy.actions import DONE, REFUSED, Abort, Context, Refuse, execute
from healer.repair.server import TOOLS, RepairTools, build_server
from tests.conftest import REPO
from tests.synth import T0, ticket

# -- the toy: ONE spec, its pure planning and its shell half side by side ---------------------------

NOTE = "toy: poked"


def _plan(s: Step):  # pure: one poke per ticket whose label went stale
    return [s.action(s.ticket, ticket=s.ticket, labels=sorted(s.evidence.get("labels") or {}))] if s.ticket else []


def _resolve(ctx, subject: str, params: dict) -> Target:
    if not _exists(ctx, subject):
        raise Refuse(f"no ticket {subject!r}")
    return Target("", subject, params, ticket=subject)


def _exists(ctx, tid: str) -> bool:
    try:
        ctx.store.ticket(tid)
    except NotFound:
        return False
    return True


def _check(ctx, t: Target) -> None:
    if ctx.store.ticket(t.ticket).state == "closed":
        raise Abort(f"{t.ticket} is closed")


def _apply(ctx, t: Target, intent: int) -> dict:
    ctx.store.comment(t.ticket, f"{NOTE} [intent {intent}]", author=ctx.actor)
    return {"poked": t.ticket}


def _verify(ctx, t: Target) -> bool:
    return any(c.body.startswith(NOTE) for c in ctx.store.comments(t.ticket))


TOY = ActionSpec(
    name="poke_ticket",
    summary="comment on a ticket whose label went stale (a toy)",
    lease="ticket",
    answers=frozenset({"stale_label"}),
    plan=_plan,
    handler=Handler(_resolve, _check, _apply, _verify),
    rate_limit=(2, "1h"),
    tool=Tool("Comment on tickets whose label went stale (a toy action of the registry's test)."),
)

POLICY = """\
version: 1
rules:
  - {id: poke-stale, when: stale_label, do: [poke_ticket]}
"""
LATER = T0 + 2 * 3600 + 1  # health.stale_labels: to-review after 2h


def test_a_toy_action_from_one_spec_is_validated_planned_executed_rate_limited_and_offered(shell_fleet):
    f = shell_fleet
    for tid in ("T-1", "T-2", "T-3"):
        f.store.add_ticket("work", id=tid)
    with actions.registered(TOY):
        # validated: a policy may name it in a rule and in the whitelist; its default rate limit is the spec's
        pol = validate_text(POLICY, "healer.yaml")
        assert "poke_ticket" in pol.remediation.allowed
        assert pol.remediation.rate_limits["poke_ticket"].count == 2
        # planned by the pure core for the finding it answers
        snap = Snapshot(now=LATER, tickets=(ticket("T-1", "queued", labels={"to-review": T0}),))
        d = decide(snap, pol, Memory())
        assert [(a.action, a.subject, a.params["labels"]) for a in d.actions] == [("poke_ticket", "T-1", ["to-review"])]
        # executed by the executor (journaled, checked, verified)
        ctx = Context(f.root, f.store, pol, f.clock)
        out = execute(ctx, d.actions[0])
        assert out.status == DONE, out
        assert [c.body for c in f.store.comments("T-1")] == [f"{NOTE} [intent {out.intent_id}]"]
        assert [(i.action, i.state) for i in f.store.intents()] == [("poke_ticket", "done")]
        # offered to the repair agent: a real MCP client lists it with its spec's description and calls it
        tools = RepairTools(f.root, f.store, pol, f.clock, run_id="R-toy")
        listed, called = anyio.run(_client, build_server(tools), "poke_ticket", {"ticket_ids": ["T-2"], "reason": "toy"})
        assert "poke_ticket" in TOOLS and listed["poke_ticket"].description == TOY.tool.description
        assert listed["poke_ticket"].input_schema["required"] == ["ticket_ids"]
        assert called.is_error is False and called.structured_content["done"] == 1, called.structured_content
        assert any(c.body.startswith(NOTE) for c in f.store.comments("T-2"))
        # rate-limited: its spec's 2 per hour are spent, by the supervisor and the repair agent together
        out = execute(ctx, d.actions[0].__class__("poke_ticket", "T-3", {"ticket": "T-3"}))
        assert out.status == REFUSED and "rate limit" in out.reason and "poke_ticket" in out.reason, out
        assert not any(c.body.startswith(NOTE) for c in f.store.comments("T-3"))
        # ... and the core defers it by the same limit once its memory holds those two
        mem = Memory(action_times={"poke_ticket": [LATER - 60, LATER - 30]})
        d2 = decide(snap, pol, mem)
        assert not d2.actions and [(a.action, "rate" in why) for a, why in d2.deferred] == [("poke_ticket", True)]
    # gone with its spec: the policy refuses the name again, in one line listing the known actions
    assert "poke_ticket" not in TOOLS
    with pytest.raises(InvalidInput) as e:
        validate_text(POLICY, "healer.yaml")
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and "poke_ticket" in msg and "expected a remediation action" in msg
    assert all(n in msg for n in actions.names())


async def _client(server, tool: str, args: dict):
    from mcp.client.client import Client

    async with Client(server) as c:
        listed = {t.name: t for t in (await c.list_tools()).tools}
        called = await c.call_tool(tool, args)
    return listed, called


# -- what ships agrees with the registry ----------------------------------------------------------

# the tables healer/core/rules.py kept by hand before the registry: derived now. The pins below read the specs (not a
# copied list), so a new action's file is all it takes; what they pin is that the derivation is the specs' own fields.

def test_the_rules_tables_are_the_specs():
    from healer.core.rules import APPLICABLE, LEASE, NON_REMEDIATING, TICKET_LEASE
    from healer.policy.schema import FINDINGS

    assert {k: set(v) for k, v in APPLICABLE.items()} == {k: {s.name for s in actions.specs() if k in s.answers} for k in APPLICABLE}
    assert set().union(*APPLICABLE.values()) == {s.name for s in actions.specs() if s.answers}
    assert dict(LEASE) == {s.name: s.lease for s in actions.specs()}
    assert set(TICKET_LEASE) == {s.name for s in actions.specs() if s.lease == "ticket"}
    assert set(NON_REMEDIATING) == {s.name for s in actions.specs() if s.lease is None}
    for s in actions.specs():  # a spec answering a finding nobody detects would silently never apply
        assert s.answers <= set(FINDINGS), s.name
    # each table is a whole Mapping / collection (len, truth, `in`), as HANDLERS is below: a plugin may size it
    n = len(actions.specs())
    assert len(LEASE) == n and bool(LEASE) and len(APPLICABLE) == len(FINDINGS)
    assert len(TICKET_LEASE) + len(NON_REMEDIATING) == n - sum(s.lease == "subject" for s in actions.specs())


def test_every_built_in_spec_resolves_to_a_handler_and_a_newcomer_finds_it_by_its_file():
    from healer.remedy.actions import HANDLERS

    files = {p.stem for p in (REPO / "healer" / "actions").glob("*.py")} - {"__init__", "spec"}
    assert files == set(actions.names())
    for name in actions.names():
        h = HANDLERS[name]
        assert all(callable(getattr(h, part)) for part in ("resolve", "check", "apply", "verify")), name
    # a mapping of exactly the registered actions: an unknown name is no action, a test's wrapper wins until removed
    assert list(HANDLERS) == list(actions.names()) and len(HANDLERS) == len(files)
    with pytest.raises(KeyError):
        HANDLERS["no_such_action"]
    real, wrapper = HANDLERS["drop_label"], object()
    HANDLERS["drop_label"] = wrapper
    try:
        assert HANDLERS["drop_label"] is wrapper
    finally:
        del HANDLERS["drop_label"]
    assert type(HANDLERS["drop_label"]) is type(real)


def test_default_yaml_and_schema_json_name_the_registered_actions_and_their_default_limits():
    names = list(actions.names())
    default = yaml.safe_load((REPO / "policies" / "default.yaml").read_text())["remediation"]
    assert default["allowed"] == names
    assert {a: (r["count"], r["per"]) for a, r in default["rate_limits"].items()} == {s.name: s.rate_limit for s in actions.specs()}
    schema = json.loads((REPO / "policies" / "schema.json").read_text())["$defs"]
    assert schema["Remediation"]["properties"]["allowed"]["items"]["enum"] == names
    assert schema["Remediation"]["properties"]["rate_limits"]["propertyNames"]["enum"] == names
    assert schema["Rule"]["properties"]["do"]["items"]["enum"] == names


def test_the_repair_agent_is_offered_every_spec_with_a_tool_unblock_ticket_included():
    from healer.repair.server import ACTION_TOOLS, READ_TOOLS, description, params_of

    assert list(ACTION_TOOLS) == [s.name for s in actions.specs() if s.tool is not None] and "unblock_ticket" in ACTION_TOOLS
    assert tuple(TOOLS) == READ_TOOLS + tuple(ACTION_TOOLS)
    assert params_of("drop_label") == {"ticket_ids", "label"} and params_of("remove_worktree") == {"paths", "reason"}
    assert all(description(t) for t in TOOLS)


def test_an_unknown_action_is_an_error_in_the_planner_never_a_silent_nothing():
    from healer.core.model import Finding
    from healer.core.plan import _step

    f = Finding("stale_label", "T-1", T0, {"ticket": "T-1", "labels": {"to-review": T0}})
    with pytest.raises(actions.UnknownAction, match="frobnicate.*known ones are close_dead_ticket"):
        _step("frobnicate", f, ["frobnicate"], "r", Snapshot(now=LATER), "rule r")
    with pytest.raises(actions.UnknownAction, match="never planned"):
        _step("resume_dispatch", f, ["resume_dispatch"], "r", Snapshot(now=LATER), "rule r")


def test_the_builtin_repair_agent_unblocks_what_nothing_blocks_and_reads_the_subjects_argument_from_the_specs():
    from healer.repair.builtin import plan

    calls, left = plan([{"kind": "stale_block", "subject": "B-1", "evidence": {"ticket": "B-1", "expect": "blocked"}},
                        {"kind": "orphan_worktree", "subject": "/f/.healer/worktrees/T-9", "evidence": {}},
                        {"kind": "agent_stuck", "subject": "A-1", "evidence": {}}])
    assert calls == [("unblock_ticket", {"ticket_ids": ["B-1"]}), ("remove_worktree", {"paths": ["/f/.healer/worktrees/T-9"]})]
    assert left == ["agent_stuck:A-1"]


def test_a_policy_cached_before_an_action_was_registered_is_not_served_after(tmp_path, monkeypatch):
    from healer.policy import cache

    monkeypatch.setenv("HEALER_CACHE_DIR", str(tmp_path))
    before = cache.key_for(b"version: 1\n")
    with actions.registered(TOY):
        assert cache.key_for(b"version: 1\n") != before  # its default allowed list and rate limits differ
    assert cache.key_for(b"version: 1\n") == before


def test_a_tool_spec_screens_its_own_arguments_and_may_require_a_finding(shell_fleet):
    """The server reads the screening from the spec: an unexpected or malformed argument refuses the call, a
    missing required one too, and `requires_finding` refuses each subject the core does not find so now."""
    from healer.actions import Param

    f = shell_fleet
    f.store.add_ticket("work", id="T-1")
    tag = ActionSpec(name="tag_ticket", summary="a toy", lease="ticket", answers=frozenset(), plan=None,
                     handler=TOY.handler, rate_limit=(5, "1h"),
                     tool=Tool("Tag tickets (a toy).", params=(Param("tag", required=True, pattern=r"[a-z]{1,10}"),),
                               requires_finding="stale_label"))
    with actions.registered(tag):
        tools = RepairTools(f.root, f.store, validate_text("version: 1\n", "healer.yaml"), f.clock, run_id="R-tag")
        out, err = tools.call("tag_ticket", {"ticket_ids": ["T-1"], "tag": "x; rm -rf /"})
        assert err and "tag_ticket: tag: expected a value matching" in out["reason"], out
        out, err = tools.call("tag_ticket", {"ticket_ids": ["T-1"], "colour": "red"})
        assert err and "unexpected argument(s) 'colour'" in out["reason"] and "it accepts tag, ticket_ids" in out["reason"]
        out, err = tools.call("tag_ticket", {"ticket_ids": ["T-1"]})
        assert err and "invalid arguments" in out["reason"] and "'tag'" in out["reason"], out
        out, err = tools.call("tag_ticket", {"ticket_ids": ["T-1"], "tag": "ok"})
        assert err and out["results"][0]["status"] == "refused" and "no stale_label finding" in out["results"][0]["reason"]
    assert not f.store.comments("T-1") and not f.store.intents()


def test_an_effect_its_verification_does_not_find_is_a_failure_journaled_not_a_silent_nothing(shell_fleet):
    """docs/supervisor.md: every action is verified after its effect; an effect not in place is `failed` (the
    outcome, a `remedy.failed` event with the reason) and its intent settled, never left begun."""
    from dataclasses import replace

    f = shell_fleet
    f.store.add_ticket("work", id="T-1")
    unseen = replace(TOY, handler=Handler(_resolve, _check, _apply, lambda ctx, t: False))
    with actions.registered(unseen):
        pol = validate_text(POLICY, "healer.yaml")
        out = execute(Context(f.root, f.store, pol, f.clock), PlannedAction("poke_ticket", "T-1", {"ticket": "T-1"}))
    assert out is not None and out.status == "failed" and out.reason == "verification failed: the effect is not in place"
    (ev,) = f.store.events(kinds=["remedy.failed"])
    assert ev.subject == "T-1" and ev.payload["reason"] == out.reason
    assert [(i.action, i.state) for i in f.store.intents()] == [("poke_ticket", "aborted")]
