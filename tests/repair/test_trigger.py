"""Acceptance 1: over generated timelines the trigger fires iff all four conditions hold, never past the daily cap."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from healer.clock import day_of
from healer.core.model import Memory
from healer.core.trigger import Blockage, blockages_from_memory, decide
from healer.policy.schema import Policy

H = 3600.0
POLICY = Policy()
CFG = POLICY.repair_agent
T0 = 1_700_000_000.0 - (1_700_000_000.0 % 86400)  # a UTC midnight


def oracle(blockages, runs, now, halted) -> bool:
    """The four conditions, restated plainly from the issue."""
    if halted:
        return False
    today = [t for t in runs if day_of(t) == day_of(now) and t <= now]
    if len(today) >= 2:
        return False
    for b in blockages:
        persisted = now - b.first_seen >= 3 * H
        signalled = b.signals >= 3
        quiet = b.last_unblock_attempt is None or b.last_unblock_attempt > now or now - b.last_unblock_attempt >= 4 * H
        if persisted and signalled and quiet:
            return True
    return False


blockage = st.builds(
    lambda k, age, sig, att: (k, age, sig, att),
    st.sampled_from(["frozen_in_progress:T-1", "stale_label:T-2", "dispatch_frozen:dispatch", "orphan_worktree:/w/3"]),
    st.floats(min_value=0, max_value=10 * H),  # age at the tick
    st.integers(min_value=0, max_value=6),
    st.one_of(st.none(), st.floats(min_value=0, max_value=10 * H)),  # attempt this long ago
)
tick = st.tuples(
    st.floats(min_value=0, max_value=6 * H),  # time since the previous tick
    st.lists(blockage, max_size=4),
    st.booleans(),  # halted
)


@settings(max_examples=300, deadline=None)
@given(st.lists(tick, min_size=1, max_size=40), st.floats(min_value=0, max_value=86400))
def test_fires_iff_all_conditions_and_never_past_cap(ticks, start):
    now = T0 + start
    runs: list[float] = []
    for gap, raw, halted in ticks:
        now += gap
        bs = [Blockage(key=k, first_seen=now - age, signals=sig, last_unblock_attempt=None if ago is None else now - ago)
              for k, age, sig, ago in raw]
        expected = oracle(bs, runs, now, halted)
        verdict = decide(bs, runs, {}, POLICY, now, halted=halted)
        assert verdict.launch == expected, verdict.reason
        assert verdict.reason
        if verdict.launch:
            runs.append(now)
    per_day: dict[str, int] = {}
    for t in runs:
        per_day[day_of(t)] = per_day.get(day_of(t), 0) + 1
    assert all(n <= CFG.max_runs_per_day for n in per_day.values())


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0, max_value=10 * H), st.integers(0, 6), st.lists(st.floats(min_value=0, max_value=10 * H), max_size=3))
def test_attempts_by_subject_count_as_unblock_attempts(age, signals, agos):
    now = T0 + 12 * H
    b = Blockage(key="frozen_in_progress:T-7", first_seen=now - age, signals=signals, subject="T-7")
    attempts = {"T-7": [now - a for a in agos]}
    got = decide([b], [], attempts, POLICY, now).launch
    quiet = all(now - t >= 4 * H for t in attempts["T-7"])  # the same float arithmetic as the trigger
    assert got == (now - b.first_seen >= 3 * H and signals >= 3 and quiet)


def test_each_condition_alone_blocks_a_launch():
    now = T0 + 12 * H
    ok = Blockage("stale_label:T-2", now - 3 * H, 3, None)
    assert decide([ok], [], {}, POLICY, now).launch
    assert not decide([Blockage("stale_label:T-2", now - 3 * H + 1, 3)], [], {}, POLICY, now).launch
    assert not decide([Blockage("stale_label:T-2", now - 3 * H, 2)], [], {}, POLICY, now).launch
    assert not decide([Blockage("stale_label:T-2", now - 3 * H, 3, now - 4 * H + 1)], [], {}, POLICY, now).launch
    assert not decide([ok], [now - 60, now - 30], {}, POLICY, now).launch
    assert decide([ok], [now - 13 * H, now - 12.5 * H], {}, POLICY, now).launch  # yesterday's runs
    v = decide([ok], [], {}, POLICY, now, halted=True)
    assert not v.launch and "HALT" in v.reason
    off = Policy.model_validate({"repair_agent": {"enabled": False}})
    assert not decide([ok], [], {}, off, now).launch


def test_blockages_from_memory():
    now = T0 + 12 * H
    mem = Memory(first_seen={"frozen_in_progress:T-1": now - 5 * H, "stale_label:T-2": now - H},
                 signals={"frozen_in_progress:T-1": 9, "stale_label:T-2": 4}, attempts={"T-1": [now - 5 * H]})
    bs = blockages_from_memory(mem, keys=["frozen_in_progress:T-1", "stale_label:T-2", "gone:x"])
    assert [b.key for b in bs] == ["frozen_in_progress:T-1", "stale_label:T-2"]
    assert bs[0].subject == "T-1" and bs[0].last_unblock_attempt == now - 5 * H
    assert decide(bs, [], mem.attempts, POLICY, now).launch
