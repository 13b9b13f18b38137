"""The loop's pure decisions: tables of cases, then hypothesis invariants."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from healer.loop import decide
from healer.loop.decide import Facts, GateResult, IterationRecord, Limits
from healer.policy.schema import Loop

RED = (GateResult("lint", 0), GateResult("tests", 1))
GREEN = (GateResult("lint", 0), GateResult("tests", 0))


def rec(n, tree="t", gates=RED, sig="s1", out=None, dup=None, cost=0.0) -> IterationRecord:
    return IterationRecord(n=n, tree_hash=tree, state_hash=decide.state_hash(tree, gates), gates=gates,
                           signature=None if all(g.passed for g in gates) else sig, output_key=out, duplicate_of=dup,
                           cost_usd=cost)


L = Limits(max_iterations=5, same_state=2, same_failure=3)


def test_all_green_is_the_only_success():
    assert decide.decide([rec(1, gates=GREEN)], L, 0, Facts()).exit_code == 0
    assert decide.decide([rec(1)], L, 0, Facts(), baseline_tree="other").go_on
    # an agent's own exit code and words are not inputs at all; a skipped or timed-out gate is not green
    skipped = (GateResult("lint", 0), GateResult("tests", None, skipped=True))
    assert decide.decide([rec(1, gates=skipped)], L, 0, Facts()).exit_code != 0
    timed = (GateResult("tests", 0, timed_out=True),)
    assert decide.decide([rec(1, gates=timed)], L, 0, Facts()).exit_code != 0
    assert not rec(1, gates=()).all_green


def test_same_state_stall_counts_unchanged_iterations():
    h = [rec(1, tree="t0"), rec(2, tree="t0")]
    assert decide.same_state_streak(h, baseline_tree="t0") == 2
    assert decide.decide(h, L, 0, Facts(), baseline_tree="t0").exit_code == 3
    assert decide.same_state_streak(h, baseline_tree="base") == 1
    assert decide.decide(h, L, 0, Facts(), baseline_tree="base").go_on


def test_same_failure_three_in_a_row():
    h = [rec(i, tree=f"t{i}", sig="x") for i in (1, 2)]
    assert decide.decide(h, L, 0, Facts()).go_on
    h.append(rec(3, tree="t3", sig="x"))
    v = decide.decide(h, L, 0, Facts())
    assert v.exit_code == 3 and "same failure signature 3 times" in v.reason
    broken = [rec(1, tree="a", sig="x"), rec(2, tree="b", sig="y"), rec(3, tree="c", sig="x")]
    assert decide.decide(broken, L, 0, Facts()).go_on


def test_duplicate_output_flag_or_stop():
    h = [rec(1, tree="a", sig="p", out="k"), rec(2, tree="b", sig="q", out="k", dup=1)]
    assert decide.decide(h, L, 0, Facts()).go_on
    stop = Limits(max_iterations=5, duplicate_output="stop")
    # the same words over a new state are a converging agent's: never a stop
    assert decide.decide(h, stop, 0, Facts()).go_on
    # the same words, back in a state seen before: no progress
    h2 = [rec(1, tree="a", sig="p", out="k"), rec(2, tree="b", sig="q"), rec(3, tree="a", sig="p", out="k", dup=1)]
    v = decide.decide(h2, stop, 0, Facts())
    assert v.exit_code == 3 and "repeats iteration 1" in v.reason


def test_budgets_exit_2():
    h = [rec(i, tree=f"t{i}", sig=f"s{i}") for i in range(1, 6)]
    assert decide.decide(h, L, 0, Facts()).reason.startswith("iteration cap reached: 5 of 5")
    assert decide.decide(h[:1], L, 5.0, Facts()).exit_code == 2  # spend cap 5 reached
    assert decide.decide(h[:1], Limits(run_timeout=60), 0, Facts(elapsed=61)).exit_code == 2
    assert decide.preflight(h[:1], Limits(max_iterations_per_day=3), 0, Facts(today=3)).exit_code == 2


def test_preflight_order_and_codes():
    assert decide.preflight([], L, 0, Facts(stop_signal="SIGTERM")).exit_code == 4
    assert decide.preflight([], L, 0, Facts(kill_switch=True)).reason == "kill switch present"
    assert decide.preflight([], L, 0, Facts(paused=True)).exit_code == 4
    assert decide.preflight([], Limits(gates=0), 0, Facts()).exit_code == 65
    assert decide.preflight([], L, 0, Facts()).go_on


def test_limits_from_policy():
    lp = Loop(max_iterations=7, stall={"same_state": 4, "same_failure": 5, "duplicate_output": "stop"},
              gates=[{"name": "t", "run": ["true"]}])
    lim = Limits.from_policy(lp)
    assert (lim.max_iterations, lim.same_state, lim.same_failure, lim.duplicate_output, lim.gates) == (7, 4, 5, "stop", 1)
    assert Limits.from_policy(lp, max_iterations=3).max_iterations == 3


PYTEST_A = """\
============================= test session starts ==============================
platform linux -- Python 3.11.2, pytest-8.3.4, pluggy-1.5.0
rootdir: /tmp/pytest-of-root/pytest-12/test_x0/repo
collected 3 items

tests/test_calc.py F..                                                   [100%]

=================================== FAILURES ===================================
___________________________________ test_add ___________________________________
    def test_add():
>       assert add(2, 3) == 5
E       assert 6 == 5
E        +  where 6 = add(2, 3)

tests/test_calc.py:5: AssertionError
=========================== short test summary info ============================
FAILED tests/test_calc.py::test_add - assert 6 == 5
========================= 1 failed, 2 passed in 0.04s ==========================
"""


def test_signature_ignores_numbers_times_paths_but_not_names():
    b = (PYTEST_A.replace("pytest-12", "pytest-97").replace("0.04s", "1.73s").replace("6 == 5", "7 == 5")
         .replace("add(2, 3)", "add(4, 3)").replace("3.11.2", "3.11.9"))
    sa, ta = decide.failure_signature("tests", PYTEST_A)
    sb, _ = decide.failure_signature("tests", b)
    assert sa == sb
    assert "test_add" in ta
    other = PYTEST_A.replace("test_add", "test_sub")
    assert decide.failure_signature("tests", other)[0] != sa
    assert decide.failure_signature("lint", PYTEST_A)[0] != sa  # the gate's name is part of it


def test_signature_is_order_insensitive():
    a = "error: a broke\nerror: b broke\n"
    b = "error: b broke\nerror: a broke\n"
    assert decide.failure_signature("g", a)[0] == decide.failure_signature("g", b)[0]


def test_normalise_strips_volatile_parts():
    n = decide.normalise("at 2026-11-30T02:23:09Z pid 4242 obj 0x7fab12 commit deadbeef12 uuid "
                         "0b9c1c44-5e0e-4c5e-9a55-1f0e8d1d2a3b in /tmp/tmpa1b2c3/x.py took 0.12s step_3 py311",
                         roots=["/work/repo"])
    assert n == "at <ts> pid <n> obj <hex> commit <hex> uuid <uuid> in <tmp> took <n>s step_3 py311"
    assert decide.normalise("/work/repo/src/a.py:12: error", roots=["/work/repo"]) == "src/a.py:<n>: error"


def test_claude_cost_and_output_key():
    line = '{"type":"result","subtype":"success","total_cost_usd":0.25,"result":"did it","session_id":"x"}'
    assert decide.reported_cost("noise\n" + line + "\n") == 0.25
    assert decide.reported_cost('{"type":"result","total_cost_usd":"lots"}') == 0.0
    assert decide.reported_cost("no json here") == 0.0
    other = line.replace("0.25", "0.5").replace('"x"', '"y"')
    assert decide.output_key(line) == decide.output_key(other)  # only the result text counts
    assert decide.output_key("") is None
    assert decide.claims_done(line.replace("did it", "Done, all tests pass"))


# -- invariants ----------------------------------------------------------------------

gate_st = st.builds(GateResult, name=st.sampled_from(["lint", "tests"]), exit_code=st.sampled_from([0, 1, 2, None]),
                    timed_out=st.booleans(), skipped=st.booleans())
rec_st = st.builds(
    lambda tree, gates, sig, out, dup, cost: IterationRecord(
        n=0, tree_hash=tree, state_hash=decide.state_hash(tree, gates), gates=tuple(gates), signature=sig,
        output_key=out, duplicate_of=dup, cost_usd=cost),
    tree=st.sampled_from(["a", "b", "c"]), gates=st.lists(gate_st, min_size=1, max_size=3),
    sig=st.sampled_from([None, "x", "y"]), out=st.sampled_from([None, "k1", "k2"]), dup=st.sampled_from([None, 1]),
    cost=st.sampled_from([0.0, 0.1, 1.0]))
limits_st = st.builds(Limits, max_iterations=st.integers(1, 12), same_state=st.integers(1, 4),
                      same_failure=st.integers(1, 4), duplicate_output=st.sampled_from(["flag", "stop"]),
                      spend_cap_usd=st.sampled_from([None, 0.5, 5.0]))


@settings(max_examples=300, deadline=None)
@given(st.lists(rec_st, min_size=1, max_size=14), limits_st)
def test_success_only_when_the_last_gates_are_all_green(history, limits):
    v = decide.decide(history, limits, sum(r.cost_usd for r in history), Facts(), "a")
    if v.exit_code == 0:
        assert all(g.passed for g in history[-1].gates)
    if all(g.passed for g in history[-1].gates):
        assert v.exit_code == 0


@settings(max_examples=300, deadline=None)
@given(st.lists(rec_st, min_size=1, max_size=14), limits_st)
def test_termination_by_construction(history, limits):
    """At the cap, the loop never goes on, whatever the history looks like."""
    if len(history) >= limits.max_iterations:
        assert not decide.decide(history, limits, 0.0, Facts(), "a").go_on
        assert not decide.preflight(history, limits, 0.0, Facts()).go_on
    v = decide.decide(history, limits, 0.0, Facts(), "a")
    assert v.exit_code in (None, 0, 2, 3, 69)


@given(st.text(max_size=300), st.integers(0, 10**9), st.integers(0, 10**9))
def test_signature_invariant_under_number_changes(text, a, b):
    log_a = f"error: value {a} at line {b}\n{text}"
    log_b = f"error: value {b} at line {a}\n{text}"
    assert decide.failure_signature("g", log_a)[0] == decide.failure_signature("g", log_b)[0]


@given(st.text(max_size=400))
def test_normalise_is_idempotent(text):
    once = decide.normalise(text)
    assert decide.normalise(once) == once


# -- the patterns and their literal checks change nothing (decide.normalise, decide.claims_done) -----------

import re as _re  # noqa: E402

_REF = [(_re.compile(p), r) for p, r in [
    (r"\x1b\[[0-9;?]*[A-Za-z]", ""),
    (r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b", "<uuid>"),
    (r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?\b", "<ts>"),
    (r"\b\d{4}-\d{2}-\d{2}\b", "<date>"),
    (r"\b\d{1,2}:\d{2}:\d{2}(\.\d+)?\b", "<time>"),
    (r"(?:/private)?(?:/tmp|/var/tmp|/var/folders|/dev/shm)/\S*|\b(?:tmp|pytest-)[A-Za-z0-9_-]*\d[A-Za-z0-9_-]*", "<tmp>"),
    (r"\b0x[0-9a-fA-F]+\b", "<hex>"),
    (r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{7,64}\b", "<hex>"),
    (r"(?<![A-Za-z_\d.])\d+(\.\d+)?", "<n>")]]
_REF_WS = _re.compile(r"[ \t]+")
_REF_DONE = _re.compile(r"(?i)\b(done|complete[d]?|finished|all tests pass(ed)?|task is complete)\b")


def _ref_normalise(text: str) -> str:
    for pat, repl in _REF:
        text = pat.sub(repl, text)
    lines = (_REF_WS.sub(" ", ln).strip() for ln in text.splitlines())
    return "\n".join(ln for ln in lines if ln)


_PIECES = st.sampled_from(["-", ":", "0x", "tmp", "pytest-", "/tmp/", "/var/folders/x", "/dev/shm/y", "\x1b[31m", "2026",
                           "12", "07", "deadbeef1", "T", " ", "\t", "\n", "a", "Z", "+01:00", ".5", "٣", "DONE", "Finished",
                           "ſ", "\u212a", "complete", "all tests passed", "task is complete", "x", "_3", "é"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=25).map("".join))
def test_normalise_and_claims_done_are_the_plain_regex_pipeline(text):
    assert decide.normalise(text) == _ref_normalise(text)
    assert decide.claims_done(text) == bool(_REF_DONE.search(text[-2000:]))
