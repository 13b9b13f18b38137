"""The pure rules behind an adopted loop's process count, memory, same-failure runs and end (healer/core/adopt.py):
invariants under Hypothesis, and each threshold firing at its number, not one step earlier."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from healer.core import decide
from healer.core.adopt import (
    AdoptedView,
    Proc,
    findings,
    group_usage,
    ident,
    same_failure_run,
    step_failures,
    step_over,
)
from healer.core.model import Memory, Snapshot
from healer.errors import InvalidInput
from healer.policy import Policy
from healer.policy.load import validate_text
from healer.records import Adopted

RULE = {"name": "loops", "match": [r"loop\.sh"], "idle": None, "stuck": None, "no_progress": None,
        "max_procs": 3, "max_memory": 100, "same_failure": 3, "gone_alert": 600}


def _policy(**kw) -> Policy:
    return Policy.model_validate({"adopt": {"enabled": True, "rules": [{**RULE, **kw}]}})


def _adopted(**kw) -> Adopted:
    base = dict(id=ident(10, 110), rule="loops", host="h", pid=10, pgid=10, start_ticks=110, started_at=1000.0,
                cwd="/w", worktree="/w", cli="claude", session_id=None, state="adopted", adopted_at=1000.0)
    base.update(kw)
    return Adopted(**base)  # type: ignore[arg-type]


def _kinds(view: AdoptedView, pol: Policy, now: float = 2000.0) -> set[str]:
    return {f.kind for f in findings(Snapshot(now=now, adopted=(view,)), pol)}


# -- process count and memory ---------------------------------------------------------------------------

@st.composite
def _tables(draw):
    """A process table: a forest of up to 12 processes, each in its parent's group or a group of its own."""
    n = draw(st.integers(1, 12))
    procs: list[Proc] = []
    for pid in range(2, n + 2):
        ppid = draw(st.sampled_from([1] + [p.pid for p in procs]))
        parent = next((p for p in procs if p.pid == ppid), None)
        pgid = parent.pgid if parent is not None and draw(st.booleans()) else pid
        procs.append(Proc(pid, ppid, pgid, pid, ("x",), "/w", 0, {}, draw(st.integers(0, 1 << 30))))
    return procs


def _descendants(procs: list[Proc], pid: int) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p in out:
            continue
        out.add(p)
        todo += [q.pid for q in procs if q.ppid == p]
    return out & {p.pid for p in procs}


@settings(max_examples=200, deadline=None)
@given(_tables(), st.data())
def test_a_loop_counts_its_own_tree_and_its_own_group_never_a_stranger(procs, data):
    loop = data.draw(st.sampled_from(procs))
    n, rss = group_usage(procs, loop.pid, loop.pgid)
    mine = _descendants(procs, loop.pid)
    if loop.pgid == loop.pid:  # a group of its own: every member is its too
        mine |= {p.pid for p in procs if p.pgid == loop.pgid}
    assert n == len(mine) >= 1 and rss == sum(p.rss for p in procs if p.pid in mine)
    # a process outside both its tree and (when it leads one) its group is never counted
    if loop.pgid != loop.pid:
        assert n == len(_descendants(procs, loop.pid))


def test_a_shared_group_counts_the_loop_alone_not_whoever_started_it():
    shell = Proc(5, 1, 5, 1, ("bash",), "/w", 0, {}, 1000)
    loop = Proc(6, 5, 5, 2, ("bash", "loop.sh"), "/w", 0, {}, 10)  # `bash loop.sh &` from a script: the shell's group
    cli = Proc(7, 6, 5, 3, ("claude",), "/w", 0, {}, 20)
    escaped = Proc(8, 7, 8, 4, ("server",), "/w", 0, {}, 40)  # setsid by the CLI: still its descendant
    assert group_usage([shell, loop, cli, escaped], 6, 5) == (3, 70)
    assert group_usage([shell, loop, cli, escaped], 5, 5) == (4, 1070)


def test_procs_and_memory_fire_above_their_numbers_not_at_them():
    pol = _policy()
    at = AdoptedView(_adopted(), True, procs=3, rss=100)
    assert _kinds(at, pol) == set()  # at the cap is within it
    over = AdoptedView(_adopted(), True, procs=4, rss=101)
    fs = {f.kind: f for f in findings(Snapshot(now=2000.0, adopted=(over,)), pol)}
    assert set(fs) == {"adopted_procs", "adopted_memory"}
    assert fs["adopted_memory"].evidence["rss"] == 101 and fs["adopted_procs"].evidence["max_procs"] == 3
    assert _kinds(AdoptedView(_adopted(), True, procs=None, rss=None), pol) == set()  # not counted: no verdict


def test_over_since_holds_while_over_so_a_rules_for_can_debounce_it():
    assert step_over({}, 10.0, {"procs": True, "memory": False}) == {"procs": 10.0}
    assert step_over({"procs": 10.0}, 20.0, {"procs": True, "memory": True}) == {"procs": 10.0, "memory": 20.0}
    assert step_over({"procs": 10.0, "memory": 20.0}, 30.0, {"procs": False, "memory": True}) == {"memory": 20.0}
    assert step_over({"memory": 20.0}, 40.0, {"procs": True, "memory": False}) == {"procs": 40.0}  # a break restarts it
    view = AdoptedView(_adopted(), True, procs=9, rss=1, over_since={"procs": 1500.0})
    [f] = findings(Snapshot(now=2000.0, adopted=(view,)), _policy())
    assert f.kind == "adopted_procs" and f.since == 1500.0


def test_memory_must_carry_its_unit_in_a_policy_file():
    text = "version: 1\nadopt:\n  rules:\n    - name: l\n      match: ['loop']\n      max_memory: 2048\n"
    try:
        validate_text(text, "healer.yaml")
    except InvalidInput as e:
        assert "healer.yaml:6:" in str(e) and "max_memory" in str(e) and "2048MiB" in str(e)
    else:
        raise AssertionError("a bare number was taken as a size")
    pol = validate_text(text.replace("2048", "2GiB"), "healer.yaml")
    assert pol.adopt.rules[0].max_memory == 2 << 30
    assert pol.model_dump(mode="json")["adopt"]["rules"][0]["max_memory"] == "2GiB"
    for bad in ("2 parsecs", "-1MiB", "true"):
        try:
            validate_text(text.replace("2048", bad), "healer.yaml")
        except InvalidInput as e:
            assert "healer.yaml:6:" in str(e)
        else:
            raise AssertionError(bad)


# -- same failure ------------------------------------------------------------------------------------------

_READINGS = st.lists(st.tuples(st.sampled_from(["k1", "k2", "k3", "k4", None]), st.sampled_from(["A", "B", None])),
                     max_size=30)


@settings(max_examples=300, deadline=None)
@given(_READINGS, st.integers(1, 10))
def test_a_run_counts_consecutive_writes_of_one_signature_and_a_reread_adds_nothing(readings, keep):
    fails: tuple = ()
    for i, (key, sig) in enumerate(readings):
        before = fails
        fails = step_failures(fails, float(i), key, sig, f"line {sig}", keep)
        again = step_failures(fails, float(i) + 0.5, key, sig, f"line {sig}", keep)
        assert again == fails  # the same file read again (same key) is not another failure
        if key is None or (before and before[-1][1] == key):
            assert fails == before
        assert len(fails) <= keep
    n, sig = same_failure_run(fails)
    tail = [s for _t, _k, s, _l in fails]
    if not tail or tail[-1] is None:
        assert (n, sig) == (0, None)
    else:
        assert sig == tail[-1] and tail[-n:] == [sig] * n and (n == len(tail) or tail[-n - 1] != sig)


def test_same_failure_fires_at_its_count_and_a_pass_ends_the_run():
    pol = _policy()
    fails: tuple = ()
    for i in range(2):
        fails = step_failures(fails, 1000.0 + i, f".loop/gates.log:10:{i}", "sig-A", "FAILED test_x", 8)
    assert "adopted_same_failure" not in _kinds(AdoptedView(_adopted(), True, failures=fails), pol)  # 2 of 3
    fails = step_failures(fails, 1002.0, ".loop/gates.log:10:2", "sig-A", "FAILED test_x", 8)
    fs = [f for f in findings(Snapshot(now=2000.0, adopted=(AdoptedView(_adopted(), True, failures=fails),)), pol)
          if f.kind == "adopted_same_failure"]
    assert len(fs) == 1 and fs[0].evidence["times"] == 3 and fs[0].evidence["line"] == "FAILED test_x"
    assert fs[0].evidence["files"] == [".loop/gates.log"] and fs[0].since == 1000.0
    passed = step_failures(fails, 1003.0, ".loop/gates.log:3:3", None, "", 8)
    assert "adopted_same_failure" not in _kinds(AdoptedView(_adopted(), True, failures=passed), pol)
    other = step_failures(fails, 1003.0, ".loop/gates.log:9:3", "sig-B", "FAILED test_y", 8)
    assert "adopted_same_failure" not in _kinds(AdoptedView(_adopted(), True, failures=other), pol)


# -- gone ----------------------------------------------------------------------------------------------------

def test_a_gone_loop_is_reported_for_its_window_and_never_offered_a_stop():
    pol = _policy(allow_stop=True)
    gone = AdoptedView(_adopted(state="gone", ended_at=1500.0), False)
    fs = findings(Snapshot(now=1500.0 + 599, adopted=(gone,)), pol)
    assert [f.kind for f in fs] == ["adopted_gone"]
    assert fs[0].evidence["identity_known"] is False and fs[0].evidence["allow_stop"] is False
    assert _kinds(gone, pol, now=1500.0 + 600) == set()  # the window is over
    assert _kinds(AdoptedView(_adopted(state="stopped", ended_at=1500.0), False), pol, now=1600.0) == set()  # healer's stop
    assert _kinds(gone, _policy(gone_alert=None), now=1501.0) == set()


def test_a_rule_may_restart_a_killed_loop_with_its_declared_command_and_nothing_else():
    pol = Policy.model_validate({"adopt": {"enabled": True, "rules": [{**RULE, "restart_command": ["bash", "loop.sh"],
                                                                       "allow_stop": True}]},
                                 "rules": [{"id": "restart-gone", "when": "adopted_gone",
                                            "do": ["notify", "snapshot_worktree", "restart_adopted"]}],
                                 "remediation": {"quiet_period": "0s"}})
    gone = AdoptedView(_adopted(state="gone", ended_at=1500.0), False)
    d = decide(Snapshot(now=1510.0, adopted=(gone,)), pol, Memory())
    assert [a.action for a in d.actions] == ["snapshot_worktree", "restart_adopted"]
    bad = "version: 1\nrules:\n  - {id: stop-gone, when: adopted_gone, do: [stop_adopted]}\n"
    try:
        validate_text(bad, "healer.yaml")  # a stop on a gone loop's pid is no action of this finding
    except InvalidInput as e:
        assert "healer.yaml:3:" in str(e) and "stop_adopted" in str(e)
    else:
        raise AssertionError("a stop was accepted for adopted_gone")
