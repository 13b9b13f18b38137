"""The pure half of adoption (healer/core/adopt.py): which processes are adopted, and the thresholds at their numbers."""

from __future__ import annotations

from healer.core import decide
from healer.core.adopt import AdoptedView, Proc, cycling, findings, ident, match, step_states
from healer.core.model import Memory, Snapshot
from healer.policy import Policy
from healer.records import Adopted

RULES = {"adopt": {"enabled": True, "rules": [
    {"name": "loops", "match": [r"loop\.sh"], "idle": "10m", "stuck": "1h", "no_progress": "20m", "cost_cap_usd": 2.0,
     "max_iterations": 5, "iterations_glob": ".loop/prompt-*.md"},
    {"name": "clis", "match": [r"(^|/)claude( |$)", r"(^|/)codex"], "exclude": ["--version"], "allow_stop": True}]}}


def _p(pid, ppid, pgid, argv, cwd="/w", ticks=100):
    return Proc(pid, ppid, pgid, ticks + pid, tuple(argv), cwd)


def test_a_loop_is_adopted_once_not_each_cli_it_starts_and_strangers_are_left_alone():
    pol = Policy.model_validate(RULES)
    procs = [
        _p(10, 1, 10, ["bash", "/x/loop.sh"]),
        _p(11, 10, 10, ["/bin/claude", "-p", "x"]),  # loop.sh's child: the loop is the one adopted
        _p(20, 1, 20, ["claude"], cwd="/v"),  # a CLI session in another worktree
        _p(30, 1, 30, ["claude"], cwd="/tmp"),  # not in a worktree
        _p(40, 1, 40, ["sleep", "100"]),  # matches nothing
        _p(50, 1, 50, ["claude", "--version"]),  # excluded
        _p(60, 1, 60, ["claude"]),  # healer's own (skipped)
    ]
    found = match(procs, pol.adopt.rules, {"/w": "/w", "/v": "/v", "/tmp": None}, skip={60})
    assert [(c.proc.pid, c.rule, c.cli, c.worktree) for c in found] == [(10, "loops", "command", "/w"),
                                                                         (20, "clis", "claude", "/v")]


def _adopted(**kw) -> Adopted:
    base = dict(id=ident(10, 110), rule="loops", host="h", pid=10, pgid=10, start_ticks=110, started_at=1000.0,
                cwd="/w", worktree="/w", cli="claude", session_id=None, state="adopted", adopted_at=1000.0)
    base.update(kw)
    return Adopted(**base)


def _kinds(now, view, pol=None):
    return sorted(f.kind for f in findings(Snapshot(now=now, adopted=(view,)), pol or Policy.model_validate(RULES)))


def test_each_threshold_fires_at_its_number_never_a_second_early():
    a = _adopted()
    v = AdoptedView(a, True, activity_at=1000.0, cost_usd=1.99, iterations=4, states=((1000.0, "h1"),))
    assert _kinds(1000.0 + 599.9, v) == []
    assert _kinds(1000.0 + 600, v) == ["adopted_idle"]
    assert _kinds(1000.0 + 1200, v) == ["adopted_idle", "adopted_no_progress"]
    assert _kinds(1000.0 + 3600, v) == ["adopted_idle", "adopted_no_progress", "adopted_stuck"]
    v2 = AdoptedView(a, True, activity_at=1100.0, cost_usd=2.0, iterations=5, states=((1100.0, "h1"),))
    assert _kinds(1200.0, v2) == ["adopted_cost", "adopted_iterations"]


def test_a_gone_or_reused_pid_and_a_rule_no_longer_in_the_policy_judge_nothing():
    v = AdoptedView(_adopted(), False, activity_at=0.0, cost_usd=99.0)
    assert _kinds(1e6, v) == []
    v = AdoptedView(_adopted(rule="removed"), True, activity_at=0.0, cost_usd=99.0)
    assert _kinds(1e6, v) == []


def test_a_b_a_b_is_a_cycle_and_history_keeps_only_changes():
    st = ()
    for t, h in ((1, "a"), (2, "a"), (3, "b"), (4, "a"), (5, "b")):
        st = step_states(st, t, h, 8)
    assert st == ((1, "a"), (3, "b"), (4, "a"), (5, "b")) and cycling(st)
    assert not cycling(((1, "a"), (2, "b"), (3, "c"), (4, "b")))
    assert len(step_states(st, 6, "c", 3)) == 3


def test_the_default_rules_snapshot_first_and_stop_only_where_the_rule_allows_it():
    pol = Policy.model_validate(RULES)
    loop = AdoptedView(_adopted(), True, activity_at=1000.0, states=((1000.0, "h"),))  # loops: allow_stop false
    cli = AdoptedView(_adopted(id=ident(20, 120), rule="clis", pid=20, pgid=20, start_ticks=120), True,
                      activity_at=1000.0, states=((1000.0, "h"),))
    d = decide(Snapshot(now=1000.0 + 6 * 3600 + 1, adopted=(loop, cli)), pol, Memory())
    acts = sorted((a.action, a.subject) for a in d.actions)
    assert ("stop_adopted", cli.adopted.id) in acts and ("stop_adopted", loop.adopted.id) not in acts
    assert ("snapshot_worktree", loop.adopted.id) in acts and ("snapshot_worktree", cli.adopted.id) in acts
    assert any(al.key.startswith("adopted_stuck:") for al in d.alerts)
