"""healer/core/trusted_time.py: a wall-clock jump or skew is found once, and no action rests on an age that crossed
it until the monotonic clock confirms it (issue 40 item 2). Pure: readings are built by hand, the clocks simulated."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from healer.clock import VirtualClock
from healer.core import decide
from healer.core import trusted_time as tt
from healer.core.dispatch import backoff_until
from healer.core.model import Memory, Snapshot
from healer.fleet.timewatch import TimeWatch
from healer.policy.schema import Policy
from healer.store import open_store
from tests.synth import T0, agent, attempt, ticket, worktree

TOL = 30.0
HOUR = 3600.0


def tb(wall: float, mono: float, store: float | None = None) -> tt.Timebase:
    return tt.Timebase(now=wall, wall=wall, mono=mono, store=store)


def run(readings, tol=TOL):
    """Fold readings in order; (final state, every jump reported)."""
    state, news = tt.TimeState(), []
    for r in readings:
        obs = tt.observe(state, r, tol)
        state = obs.state
        news.extend(obs.news)
    return state, news


# -- detection ------------------------------------------------------------------------------------
@given(st.lists(st.floats(0.01, 600), min_size=1, max_size=40), st.lists(st.floats(-TOL / 2.1, TOL / 2.1), min_size=41,
                                                                         max_size=41))
def test_steady_clocks_never_jump(gaps, jitter):
    """Wall time that moves as monotonic time does (give or take less than the tolerance) is no jump."""
    mono, readings = 100.0, []
    for i, g in enumerate([0.0, *gaps]):
        mono += g
        readings.append(tb(T0 + mono + jitter[i], mono))
    state, news = run(readings)
    assert news == [] and state.jumps == () and state.skew is None


@given(st.floats(-3 * HOUR, 3 * HOUR).filter(lambda s: abs(s) > TOL + 1), st.integers(1, 20), st.integers(1, 20))
def test_a_step_is_reported_once(step, before, after):
    mono, readings = 0.0, []
    for i in range(before + after):
        mono += 30
        readings.append(tb(T0 + mono + (step if i >= before else 0), mono))
    state, news = run(readings)
    assert len(news) == 1 and news[0].kind == tt.JUMP and abs(news[0].size - step) < 1e-6
    assert len(state.jumps) == 1


def test_a_skew_is_reported_once_and_ends_when_the_clocks_agree():
    rs = [tb(T0 + m, m, store=T0 + m - 2 * HOUR) for m in (0, 30, 60)] + [tb(T0 + 90, 90, store=T0 + 90)]
    state, news = run(rs)
    assert [j.kind for j in news] == [tt.SKEW] and news[0].size == 2 * HOUR
    assert state.skew is None


def test_no_tolerance_trusts_every_clock():
    state, news = run([tb(T0, 0), tb(T0 + 2 * HOUR, 30)], tol=None)
    assert news == [] and state.jumps == ()


# -- the hold -----------------------------------------------------------------------------------
def _world(step, t_step, t0, threshold, tick=30.0, end=6 * HOUR):
    """A condition that truly began at monotonic t0, stamped on the wall clock of that moment; the wall clock steps by
    `step` at monotonic t_step. Yields (true age, acted) at every tick: acted = the finding fires on the wall clock
    and its age is trusted."""
    state = tt.TimeState()
    since = None
    m = 0.0
    while m <= end:
        wall = T0 + m + (step if m >= t_step else 0.0)
        if since is None and m >= t0:
            since = wall
        r = tb(wall, m)
        state = tt.observe(state, r, TOL).state
        if since is not None and wall - since >= threshold:
            yield m - t0, tt.untrusted(since, threshold, r, state) is None
        m += tick


@settings(max_examples=300)
@given(st.floats(-3 * HOUR, 3 * HOUR), st.floats(0, 4 * HOUR), st.floats(0, 4 * HOUR), st.sampled_from([300.0, 1800.0, 5400.0]))
def test_nothing_acts_on_an_age_shorter_than_its_threshold(step, t_step, t0, threshold):
    """Whatever the step (forward, back, none) and whenever the condition began, an age is acted on only when the
    condition truly lasted its threshold (the tolerance aside: a step within it is no jump)."""
    for true_age, acted in _world(step, t_step, t0, threshold):
        if acted:
            assert true_age >= threshold - TOL - 1e-6


@settings(max_examples=200)
@given(st.floats(TOL + 1, 3 * HOUR), st.floats(0, 2 * HOUR), st.sampled_from([300.0, 1800.0, 5400.0]))
def test_a_true_condition_is_confirmed_within_its_threshold_of_the_jump(step, t0, threshold):
    """A forward step holds a true condition at most its threshold on the monotonic clock after the step was seen."""
    t_step = 2 * HOUR + 15
    acted = [age for age, ok in _world(step, t_step, t0, threshold) if ok]
    assert acted, "never acted"
    assert acted[0] <= max(threshold, (t_step - t0) + threshold) + 30 + 1e-6


def test_an_age_measured_after_the_jump_is_plain():
    state = run([tb(T0, 0), tb(T0 + 2 * HOUR + 30, 30)])[0]
    now = tb(T0 + 2 * HOUR + 230, 230)
    assert tt.untrusted(T0 + 2 * HOUR + 40, 300, now, state) is None  # began after the jump was seen
    assert tt.untrusted(T0 - 100, 300, now, state) is not None  # began before it: held for 300 s from the jump
    assert tt.untrusted(T0 - 100, 300, tb(T0 + 2 * HOUR + 340, 340), state) is None  # confirmed


# -- the planner --------------------------------------------------------------------------------
def _stuck_fleet(now: float, times: tt.Timebase | None, state: tt.TimeState | None) -> Snapshot:
    return Snapshot(now=now, tickets=(ticket("T-1", "in_progress"), ticket("T-2", "done")),
                    agents=(agent("A-1", "T-1", worktree="wt/T-1"),), worktrees=(worktree("wt/T-2", "T-2"),),
                    last_dispatch_tick=now - 2 * HOUR, dispatcher_alive=False, time=times, clock=state)


def test_the_plan_holds_stop_remove_and_pages_across_a_jump_and_acts_once_confirmed():
    p = Policy()
    state = run([tb(T0, 0), tb(T0 + 2 * HOUR + 30, 30)])[0]
    now = T0 + 2 * HOUR + 30
    d = decide(_stuck_fleet(now, tb(now, 30), state), p, Memory())
    kinds = {f.kind for f in d.findings}
    assert {"agent_stuck", "orphan_worktree", "dispatch_frozen"} <= kinds
    assert [a.action for a in d.actions] == []
    assert [a.key for a in d.alerts if a.severity != "info"] == []
    held = {a.action: why for a, why in d.deferred}
    assert held["stop_agent"].startswith("clock: the wall clock jumped +7200s")
    assert held["remove_worktree"].startswith("clock:")
    # without the jump the same snapshot acts (what the clock alone did before)
    d0 = decide(_stuck_fleet(now, None, None), p, Memory())
    assert {"stop_agent", "remove_worktree"} <= {a.action for a in d0.actions}
    # confirmed: agent_stuck's 90 minutes on the monotonic clock after the jump
    later = now + p.health.agent_stuck
    d2 = decide(_stuck_fleet(later, tb(later, 30 + p.health.agent_stuck), state), p, Memory())
    assert {"stop_agent", "remove_worktree"} <= {a.action for a in d2.actions}


# -- leases -------------------------------------------------------------------------------------
@given(st.floats(-3 * HOUR, 3 * HOUR), st.integers(2, 40))
def test_a_live_holder_is_never_robbed_by_its_clock(offset, renewals):
    """A holder renewing every ttl/3 on a clock `offset` off ours: never expired in our eyes while it renews."""
    ttl, w, mono = 90.0, None, 0.0
    for i in range(renewals):
        mono = i * ttl / 3
        now = T0 + mono
        expires = now + offset + ttl  # its clock, its renewal
        w = tt.watch(w, ("leader", 1, expires), mono, expires <= now)
        for dt in (0.0, ttl / 3 - 1):
            if i == 0 and expires <= now:
                continue  # a first look at an expired record: believed (a process just started, nothing to doubt)
            assert not tt.lease_expired(w, expires, ttl, now + dt, mono + dt)


@given(st.floats(-3 * HOUR, 3 * HOUR))
def test_a_dead_holder_loses_its_lease_within_its_ttl_on_the_monotonic_clock(offset):
    ttl = 90.0
    expires = T0 + offset + ttl
    w = tt.watch(tt.watch(None, ("leader", 1, expires - 30), 0.0, False), ("leader", 1, expires), 30.0, expires <= T0 + 30)
    assert tt.lease_expired(w, expires, ttl, T0 + 30 + ttl, 30.0 + ttl)


def test_a_lease_is_not_taken_by_a_process_whose_own_clock_jumped():
    w = tt.watch(None, ("leader", 1, T0 + 60), 0.0, False)  # seen fresh: judged on the watch
    assert not tt.lease_expired(w, T0 + 60, 90, T0 + 2 * HOUR, 10.0)  # the wall jumped 2 h in 10 s of watching
    assert tt.lease_expired(w, T0 + 60, 90, T0 + 2 * HOUR, 90.0)  # unrenewed for its ttl
    first = tt.watch(None, ("leader", 1, T0 + 60), 0.0, True)  # a first look at a record already expired: believed
    assert tt.lease_expired(first, T0 + 60, 90, T0 + 2 * HOUR, 0.0)
    assert not tt.lease_expired(first, T0 + 60, 90, T0 + 2 * HOUR, 0.0, clock_doubt=True)


# -- backoff after a step back --------------------------------------------------------------------
def test_a_backoff_from_before_a_step_back_starts_at_the_step():
    a = replace(attempt(1, "T-1", at=T0), ended_at=T0 + 100, exit_code=1)
    now = T0 - 2 * HOUR + 130  # the clock stepped back 2 h at T0 + 130
    assert backoff_until([a], [60.0], now) == T0 + 160  # as written: 2 h of waiting
    steps = tt.steps_back(run([tb(T0 + 100, 100), tb(now, 130)])[0])
    assert backoff_until([a], [60.0], now, steps) == now + 60
    assert backoff_until([a], [60.0], T0 + 200, steps) == T0 + 160  # a stamp not in the future stands


# -- the shell's watch, across processes of one host -----------------------------------------------
class HostClock(VirtualClock):
    """A virtual clock whose monotonic count is the host's, as SystemClock's (/proc/uptime): readings of two
    processes compare."""

    SHARED_MONOTONIC = True


def test_a_short_lived_process_finds_the_jump_against_the_last_saved_reading_and_reports_it_once(tmp_path):
    """`healer supervise --once` from cron: each run a new process; the step between two runs is found by comparing
    with the reading the last run saved (clock.reading:HOST), reported by one run only, and held by the next."""
    root = tmp_path / "fleet"
    (root / ".healer").mkdir(parents=True)
    clock = HostClock(T0)
    store = open_store(root, clock)
    try:
        TimeWatch(clock).read(store, TOL, "supervisor", "h1")  # run 1
        clock.advance(600)
        clock.jump(2 * HOUR)
        _, state = TimeWatch(clock).read(store, TOL, "supervisor", "h1")  # run 2: a new process
        assert [j.size for j in state.jumps] == [2 * HOUR]
        clock.advance(600)
        _, state3 = TimeWatch(clock).read(store, TOL, "supervisor", "h1")  # run 3 knows it, reports nothing
        assert [j.size for j in state3.jumps] == [2 * HOUR]
        assert len(store.events(kinds=["clock.jump"])) == 1
        assert TimeWatch(clock).read(store, TOL, "supervisor", "h2")[1].jumps == ()  # another host's reading is its own
    finally:
        store.close()


def test_a_stamp_written_before_a_step_back_counts_from_when_the_step_was_seen():
    """not_after: a stamp later than now counts from the latest step (seen at) whose cutoff covers it; a stamp no
    step covers (another host's clock ahead), one not in the future, or no `now` stands as written."""
    steps = [(250.0, 90.0), (300.0, 95.0)]  # (the wall before the step back: the cutoff, when it was seen)
    assert tt.not_after(200.0, 100.0, steps) == 95.0  # both cover it: the latest
    assert tt.not_after(260.0, 100.0, steps) == 95.0  # only the second covers it
    assert tt.not_after(400.0, 100.0, steps) == 400.0  # none covers it
    assert tt.not_after(80.0, 100.0, steps) == 80.0 and tt.not_after(100.0, 100.0, steps) == 100.0
    assert tt.not_after(200.0, None, steps) == 200.0


def test_without_a_reading_or_a_memory_of_the_clocks_no_age_is_untrusted():
    """untrusted() with no timebase (no reading this tick) or no state (a process that remembers nothing yet):
    nothing to judge by, so nothing is held back, whatever the other holds."""
    j = tt.Jump("jump", 3600.0, seen=1000.0, mono=10.0, cutoff=900.0)
    state = tt.TimeState(jumps=(j,))
    tb = tt.Timebase(now=1000.0, wall=1000.0, mono=11.0)
    assert tt.untrusted(0.0, 600.0, tb, state) is j  # both known: the jump holds an age from before it
    assert tt.untrusted(0.0, 600.0, None, state) is None
    assert tt.untrusted(0.0, 600.0, tb, None) is None
