"""A hypothesis state machine over the simulated fleet: rules file tickets, let time pass, inject
faults and crash the supervisor; after every step the invariants hold on the history so far."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from chaos import explore
from chaos.checkers import INVARIANTS
from chaos.engine.sim import SimEngine
from chaos.scenario import Scenario
from chaos.scenario_parts import Fault

STEP_INVARIANTS = ("one_live_agent_per_ticket", "one_lease_holder", "notifications_within_quota",
                   "no_user_file_deleted", "intents_settled", "never_merged_broken", "no_double_effect")


class Fleet(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="explore-sm-"))
        self.eng: SimEngine | None = None
        self.n = 0

    @initialize(seed=st.integers(0, 2**16), pool=st.integers(1, 3))
    def start(self, seed: int, pool: int) -> None:
        sc = Scenario.model_validate({
            "name": "state-machine", "mode": "simulated", "seed": seed, "duration": "24h",
            "fleet": {"pool_size": pool}, "overrides": explore.POLICY,
            "expect": [{"invariant": n} for n in STEP_INVARIANTS]})
        self.eng = SimEngine(sc, self.dir)
        self.eng.begin()

    @rule(behaviour=st.sampled_from(explore.BEHAVIOURS))
    def file_ticket(self, behaviour: str) -> None:
        self.n += 1
        self.eng.add_ticket(f"E-{self.n}", behaviour)

    @rule(minutes=st.integers(1, 90))
    def time_passes(self, minutes: int) -> None:
        self.eng.advance(self.eng.until + 60 * minutes)

    @precondition(lambda self: self.n > 0)
    @rule(kind=st.sampled_from(explore.timed_faults()), which=st.integers(0, 10), size=st.integers(1, 6))
    def fault(self, kind: str, which: int, size: int) -> None:
        target = [None, "E-*", *(f"E-{i}" for i in range(1, self.n + 1))][which % (self.n + 2)]
        f = explore.make_fault(kind, 1, target, size)
        f.pop("at")
        self.eng.at(self.eng.until, "fault", Fault.model_validate({**f, "at": 0}))
        self.eng.advance(self.eng.until)

    @rule(failpoint=st.sampled_from(explore.FAILPOINTS), hit=st.integers(1, 3))
    def crash_supervisor_mid_action(self, failpoint: str, hit: int) -> None:
        """Arm a failpoint: the supervisor dies at that point of its next remediation (memory lost, lease kept)."""
        self.eng.fp_queue.append((failpoint, "raise", hit))
        self.eng.fp_names.append(failpoint)
        if len(self.eng.fp_queue) == 1:
            self.eng._arm_failpoint()

    @invariant()
    def invariants_hold(self) -> None:
        if self.eng is None:
            return
        h = self.eng.history()
        for name in STEP_INVARIANTS:  # intents_settled waits for the tick after a crash (chaos/checkers.py)
            ok, msg = INVARIANTS[name](h)
            assert ok, f"{name} at +{self.eng.until:.0f}s: {msg}"

    def teardown(self) -> None:
        try:
            if self.eng is not None:
                # let a crashed supervisor come back (its lease expires first) and finish what it journaled
                self.eng.advance(self.eng.until + self.eng.policy.supervisor.lease_ttl + 3 * self.eng.tick)
                r = self.eng.end()
                assert r.status == "passed", r.error or "\n".join(c.message for c in r.failures)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


Fleet.TestCase.settings = settings(max_examples=int(os.environ.get("HEALER_EXPLORE_EXAMPLES", "30")),
                                   stateful_step_count=25, deadline=None, database=None,
                                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TestFleet = pytest.mark.campaign(Fleet.TestCase)  # the real dispatcher and supervisor each step (issue 12): a campaign
