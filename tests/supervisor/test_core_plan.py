"""Planning: rules, limits, alerts, fail-open sentinels and memory, on small hand-built fleets."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from healer.core import decide
from healer.core import memory as memmod
from healer.core.limits import BlastRadius, First, Halt, QuietPeriod, RateLimit, Tally
from healer.core.model import Memory, PlannedAction, Snapshot
from healer.policy.schema import Policy, Rule, RuleLimits
from tests.synth import T0, agent, ticket

FROZEN_AT = T0 + 600  # frozen_in_progress is due 10 min after T0


def frozen(n: int, now: float = FROZEN_AT, **kw) -> Snapshot:
    return Snapshot(now=now, tickets=tuple(ticket(f"T-{i}", "in_progress") for i in range(1, n + 1)), **kw)


def policy(**rem) -> Policy:
    return Policy.model_validate({"remediation": rem} if rem else {})


def acted(d) -> list[tuple[str, str]]:
    return [(a.action, a.subject) for a in d.actions]


def reasons(d) -> set[str]:
    return {why.split(":")[0] for _a, why in d.deferred}


def test_halt_and_observe_only_defer_everything_but_still_alert():
    s = Snapshot(now=FROZEN_AT, tickets=(ticket("T-1", "in_progress"),), halted=True, main_status="red", main_red_since=T0)
    d = decide(s, Policy(), Memory())
    assert d.actions == () and reasons(d) == {"halt"}
    assert {a.action for a, _ in d.deferred} == {"requeue_ticket", "pause_dispatch"}
    assert [a.key for a in d.alerts] == ["main_red:main"]  # observe-only still observes
    assert d.memory.attempts == {} and d.memory.action_times == {}
    assert not d.repair
    d2 = decide(frozen(1), policy(observe_only=True), Memory())
    assert d2.actions == () and reasons(d2) == {"halt"}


def test_blast_radius():
    d = decide(frozen(30), policy(max_actions_per_tick=7), Memory())
    assert len(d.actions) == 7
    assert acted(d) == [("requeue_ticket", f"T-{i}") for i in (1, 10, 11, 12, 13, 14, 15)]  # fixed order: by subject
    assert reasons(d) == {"blast radius"} and len(d.deferred) == 23


def test_rate_limit_is_a_sliding_window_over_memory():
    p = policy(rate_limits={"requeue_ticket": {"count": 3, "per": "1h"}})
    mem = Memory(action_times={"requeue_ticket": [FROZEN_AT - 3_000, FROZEN_AT - 3_700]})  # one inside the hour
    d = decide(frozen(5), p, mem)
    assert len(d.actions) == 2 and reasons(d) == {"rate limit"}
    d2 = decide(frozen(5, now=FROZEN_AT + 3_601), p, Memory(action_times=d.memory.action_times))
    assert len(d2.actions) == 3


def test_quiet_period_shared_with_humans_and_the_repair_agent():
    p = Policy()
    q = p.remediation.quiet_period
    human = Memory(attempts={"T-1": [FROZEN_AT - q + 1]})  # e.g. a `healer board` requeue by a human
    d = decide(frozen(2), p, human)
    assert acted(d) == [("requeue_ticket", "T-2")]
    assert [(a.subject, why.split(":")[0]) for a, why in d.deferred] == [("T-1", "quiet period")]
    later = decide(frozen(2, now=FROZEN_AT + 1), p, human)
    assert ("requeue_ticket", "T-1") in acted(later)
    again = decide(frozen(2, now=FROZEN_AT + 30), p, later.memory)  # the next tick: our own attempt holds the lease
    assert acted(again) == []


def test_one_remediation_per_subject_per_tick():
    s = Snapshot(now=T0 + 99_999, tickets=(ticket("T-1", "in_progress", labels={"to-review": T0}),),
                 agents=(agent("A-1", "T-1", worktree="w"),))
    d = decide(s, Policy(), Memory())
    assert len([a for a in d.actions if a.params.get("ticket") == "T-1"]) == 1
    assert any("already remediated this tick" in why for _a, why in d.deferred)


def test_whitelist():
    d = decide(frozen(1), policy(allowed=["notify", "escalate"]), Memory())
    assert d.actions == () and reasons(d) == {"not allowed"}


def test_rule_override_debounce_escalate_after_and_limits():
    rules = [{"id": "slow-requeue", "when": "frozen_in_progress", "for": "5m", "do": ["requeue_ticket"],
              "escalate_after": 2, "limits": {"max_per_hour": 1}}]
    p = Policy.model_validate({"rules": rules})
    d = decide(frozen(2), p, Memory())
    assert d.actions == () and reasons(d) == {"debounce"}
    d = decide(frozen(2, now=FROZEN_AT + 300), p, d.memory)
    assert acted(d) == [("requeue_ticket", "T-1")] and reasons(d) == {"max_per_hour"}
    assert d.actions[0].rule == "slow-requeue"
    mem = Memory(first_seen=d.memory.first_seen, attempts={"T-1": [FROZEN_AT - 20_000, FROZEN_AT - 15_000]})
    d = decide(frozen(1, now=FROZEN_AT + 300), p, mem)
    assert acted(d) == [("escalate", "T-1")]
    assert "escalate_after" in d.actions[0].params["why"]


def test_inapplicable_steps_are_reported_not_done():
    rule = {"id": "x", "when": "frozen_in_progress", "do": ["remove_worktree", "requeue_ticket"]}
    with pytest.raises(ValidationError, match="expected an action that applies to frozen_in_progress"):
        Policy.model_validate({"rules": [rule]})  # a policy refuses it, as `healer runbook check` does (issue 41)
    # the core still defends against one that reached it unvalidated
    p = Policy().model_copy(update={"rules": [Rule.model_construct(**{**rule, "for_": 0.0, "limits": RuleLimits(),
                                                                       "escalate_after": None, "labels": []})]})
    d = decide(frozen(1), p, Memory())
    assert acted(d) == [("requeue_ticket", "T-1")]
    assert reasons(d) == {"not applicable"}


def test_alerts_dedupe_by_key_within_the_cooldown():
    p = Policy()
    s = Snapshot(now=T0 + 7_200, last_supervisor_tick=T0)
    d1 = decide(s, p, Memory())
    assert [a.key for a in d1.alerts] == ["supervisor_silent:supervisor"]
    d2 = decide(Snapshot(now=s.now + 60, last_supervisor_tick=T0), p, d1.memory)
    assert d2.alerts == ()
    d3 = decide(Snapshot(now=s.now + p.sentinels.cooldown, last_supervisor_tick=T0), p, d2.memory)
    assert [a.key for a in d3.alerts] == ["supervisor_silent:supervisor"]


def test_failed_source_sentinel_is_unknown_and_blocks_nothing():
    s = Snapshot(now=T0 + 99_999, main_status="red", main_red_since=T0, failed_sources=frozenset({"main", "dispatch"}),
                 tickets=(ticket("T-1", "queued", at=T0),), last_launch_at=T0)
    d = decide(s, Policy(), Memory())
    by = {f.kind: f for f in d.findings}
    assert by["main_red"].status == "unknown" and by["dispatch_frozen"].status == "unknown"
    assert by["main_red"].evidence["failed_sources"] == ["main"]
    assert not any(a.action == "pause_dispatch" for a in d.actions)  # dispatch not paused: fail-open
    assert not d.alerts and "main_red:main" not in d.memory.first_seen


def test_memory_tracks_what_fires_and_forgets_what_stopped():
    d1 = decide(frozen(1), Policy(), Memory())
    assert d1.memory.first_seen == {"frozen_in_progress:T-1": FROZEN_AT}
    d2 = decide(frozen(1, now=FROZEN_AT + 30), Policy(), d1.memory)
    assert d2.memory.first_seen == {"frozen_in_progress:T-1": FROZEN_AT} and d2.memory.signals["frozen_in_progress:T-1"] == 2
    gone = decide(Snapshot(now=FROZEN_AT + 60, tickets=(ticket("T-1", "queued", at=FROZEN_AT + 45),)), Policy(), d2.memory)
    assert "frozen_in_progress:T-1" not in gone.memory.first_seen
    assert gone.memory.attempts == {"T-1": [FROZEN_AT]}  # attempts outlive the finding (quiet period)


def test_memory_json_round_trip():
    d = decide(frozen(3), Policy(), Memory(repair_runs=[FROZEN_AT - 5]))
    text = json.dumps(memmod.dump(d.memory))
    assert memmod.load(json.loads(text)) == d.memory
    assert memmod.load({}) == Memory() and memmod.load(None) == Memory()


def test_memory_load_rejects_garbage_with_one_line():
    import pytest

    from healer.errors import InvalidInput

    with pytest.raises(InvalidInput, match=r"attempts.T-1: expected a list of times"):
        memmod.load({"attempts": {"T-1": 5}})
    with pytest.raises(InvalidInput, match=r"cooldowns.k: expected a number"):
        memmod.load({"cooldowns": {"k": "soon"}})


def test_limits_compose_first_reason_wins():
    pa = [PlannedAction("requeue_ticket", "T-1", {"ticket": "T-1"})]
    tally = Tally(100.0, Memory(attempts={"T-1": [90.0]}, action_times={"requeue_ticket": [99.0]}))
    assert First((Halt(False), QuietPeriod(60), RateLimit({"requeue_ticket": (1, 60)}))).why_not(pa, "T-1", None, tally).startswith("quiet")
    assert First((RateLimit({"requeue_ticket": (1, 60)}), QuietPeriod(60))).why_not(pa, "T-1", None, tally).startswith("rate")
    assert First((Halt(True), BlastRadius(0))).why_not(pa, None, None, tally) == "halt"
    assert First((QuietPeriod(5), RateLimit({"requeue_ticket": (2, 60)}), BlastRadius(1))).why_not(pa, "T-1", None, tally) is None
    notify = [PlannedAction("escalate", "T-1", {})]
    assert QuietPeriod(60).why_not(notify, "T-1", None, tally) is None  # escalation is no unblock attempt


def test_repair_trigger_runs_on_the_same_memory():
    p = Policy()
    mem = Memory(first_seen={"frozen_in_progress:T-1": FROZEN_AT - p.repair_agent.blocked_for},
                 signals={"frozen_in_progress:T-1": 50}, attempts={"T-1": [FROZEN_AT - p.repair_agent.quiet_period - 1]})
    d = decide(frozen(1), Policy.model_validate({"remediation": {"allowed": ["notify"]}}), mem)
    assert d.repair, d.repair_reason
    assert not decide(frozen(1, halted=True), p, mem).repair


def every_kind() -> Snapshot:
    from healer.records import Proposal
    from tests.synth import attempt, worktree

    now = T0 + 100_000
    old = T0
    return Snapshot(
        now=now,
        tickets=(
            ticket("T-dead", "in_progress", at=old), ticket("T-idle", "in_progress", at=old),
            ticket("T-stuck", "in_progress", at=old), ticket("T-frozen", "in_progress", at=old),
            ticket("T-label", "queued", at=old, labels={"to-review": old}), ticket("T-done", "done", at=old),
            ticket("T-zombie", "queued", at=old, data={"merged_commit": "abc"}),
            ticket("T-c1", "queued", at=old, blocked_by=("T-c2",)), ticket("T-c2", "queued", at=old, blocked_by=("T-c1",)),
            ticket("T-repush", "in_progress", at=old), ticket("T-wait", "queued", at=old),
            ticket("T-blocked", "blocked", at=old),
        ),
        agents=(
            agent("A-dead", "T-dead", alive=False, worktree="w/dead", at=old),
            agent("A-idle", "T-idle", worktree="w/idle", at=old, heartbeat_at=now - 2_000, progress_at=now - 2_000),
            agent("A-stuck", "T-stuck", worktree="w/stuck", at=old),
            agent("A-repush", "T-repush", worktree="w/repush", at=old, heartbeat_at=now, progress_at=now),
        ),
        worktrees=(worktree("w/dead", "T-dead"), worktree("w/idle", "T-idle"), worktree("w/stuck", "T-stuck"),
                   worktree("w/repush", "T-repush"), worktree("w/orphan", "T-done", unknown=("x.txt",))),
        attempts={"T-repush": (attempt(1, "T-repush", head="h", state_hash="s"), attempt(2, "T-repush", head="h", state_hash="s"))},
        proposals=(Proposal(1, "T-x", "b", "c", "open", old),),
        unknown_files=("worktrees/stray.txt",),
        main_status="red", main_red_since=old, pool_size=4, last_launch_at=old, last_close_at=old - 1,
        last_supervisor_tick=old,
        spend=((now - 1800, "run-a", 30.0), (now - 600, "run-b", 25.0)),  # $55 within the hour
    )


def test_a_fleet_with_every_finding_kind_plans_for_each():
    from healer.core.adopt import AdoptedView
    from healer.policy.schema import FINDINGS
    from healer.records import Adopted

    p = Policy.model_validate({"remediation": {"max_actions_per_tick": 50}, "adopt": {"enabled": True, "rules": [
        {"name": "loops", "match": ["loop"], "cost_cap_usd": 1.0, "max_iterations": 3, "allow_stop": True,
         "max_procs": 4, "max_memory": "1MiB"}]}})
    s = every_kind()
    now = s.now
    a = Adopted("A1-1", "loops", "h", 1, 1, 1, now - 86_400, "/w", "/w", "claude", None, "adopted", now - 86_400)
    # an adopted loop that fires every adopted_* kind: idle, a day old, over its spend, iterations, processes and
    # memory, A-B-A-B, failing the same way three times; and one that ended a minute ago without healer (gone)
    cyc = tuple((now - 80_000 + i, "ab"[i % 2]) for i in range(4))
    fails = tuple((now - 300 + i, f"gates.log:{i}", "sig", "FAILED test_x") for i in range(3))
    gone = Adopted("A2-2", "loops", "h", 2, 2, 2, now - 3600, "/v", "/v", "claude", None, "gone", now - 3600,
                   ended_at=now - 60)
    s = Snapshot(**{**s.__dict__, "adopted": (
        AdoptedView(a, True, now - 86_000, 2.0, 5, cyc, procs=9, rss=8 << 20, failures=fails), AdoptedView(gone, False))})
    d = decide(s, p, Memory())
    kinds = {f.kind for f in d.findings}
    # dispatch_frozen is silenced by the red main (its own alarm); pool_saturated needs a full pool: checked alone
    assert set(FINDINGS) - kinds == {"dispatch_frozen", "pool_saturated"}
    answered = {a.reason for a in d.actions} | {al.key for al in d.alerts}
    assert {f.key for f in d.findings} <= answered, {f.key for f in d.findings} - answered
    green = Snapshot(**{**s.__dict__, "main_status": "green"})
    assert "dispatch_frozen" in {f.kind for f in decide(green, p, Memory()).findings}


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_same_decision_across_processes_whatever_the_hash_seed():
    """Replays run in other processes: nothing may depend on set or dict-of-set iteration order."""
    import os
    import subprocess
    import sys

    code = ("import json,dataclasses;from healer.core import decide;from healer.core.model import Memory;"
            "from tests.synth import fleet;from healer.core.memory import dump;from healer.policy.schema import Policy;"
            "d=decide(fleet(2000,200,200),Policy.model_validate({'remediation':{'max_actions_per_tick':500}}),Memory());"
            "print(json.dumps([[dataclasses.asdict(f) for f in d.findings],[dataclasses.asdict(a) for a in d.actions],"
            "[[dataclasses.asdict(a),w] for a,w in d.deferred],[dataclasses.asdict(a) for a in d.alerts],dump(d.memory)],"
            "sort_keys=True,default=str))")
    outs = {subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True,
                           text=True, check=True, timeout=120).stdout for seed in ("1", "2", "3")}
    assert len(outs) == 1


def test_debounce_holds_alerts_too():
    p = Policy.model_validate({"rules": [{"id": "quiet-main", "when": "main_red", "for": "10m", "do": ["notify", "pause_dispatch"]}]})
    early = decide(Snapshot(now=T0, main_status="red", main_red_since=T0), p, Memory())
    assert not early.alerts and not early.actions and reasons(early) == {"debounce"}
    later = decide(Snapshot(now=T0 + 600, main_status="red", main_red_since=T0), p, early.memory)
    assert [a.key for a in later.alerts] == ["main_red:main"] and [a.action for a in later.actions] == ["pause_dispatch"]
