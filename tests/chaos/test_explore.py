"""Hypothesis exploration (issue 7): generated fault schedules vs. the invariants, shrinking, replay.

Example counts are modest (HEALER_EXPLORE_EXAMPLES, default 30) so the area stays fast in CI;
`healer gameday explore -n 500` is the long search.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from chaos import engine, explore
from chaos.checkers import INVARIANTS
from chaos.scenario import load
from tests.conftest import healer

EXAMPLES = int(os.environ.get("HEALER_EXPLORE_EXAMPLES", "30"))
CI = settings(max_examples=EXAMPLES, deadline=None, database=None, print_blob=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _replay_hint(schedule: dict) -> str:
    fd, path = tempfile.mkstemp(prefix=f"explore-{schedule['seed']}-", suffix=".yaml")
    os.close(fd)
    Path(path).write_text(explore.scenario_yaml(schedule))
    return f"reproduce with: healer gameday replay --seed {schedule['seed']} {path}\nschedule: {json.dumps(schedule)}"


@pytest.mark.campaign  # the simulated world runs the real dispatcher and supervisor (issue 12): minutes, not seconds
@CI
@given(explore.schedules())
def test_generated_schedules_hold_the_invariants(schedule):
    with tempfile.TemporaryDirectory(prefix="explore-") as d:
        r = explore.run_schedule(schedule, d)
    assert r.status != "error", f"{r.error}\n{r.stats.get('traceback', '')}\n{_replay_hint(schedule)}"
    assert r.ok, "\n".join(c.message for c in r.failures) + "\n" + _replay_hint(schedule)
    assert {c.name for c in r.checks} == {f"invariant({n})" for n in explore.INVARIANTS}


@pytest.mark.campaign  # hypothesis shrinking runs hundreds of simulated game days: 3-10 minutes on 2 cores
def test_exploration_shrinks_a_planted_bug_to_its_core(monkeypatch, tmp_path):
    """Without crash recovery, a supervisor killed between journaling and acting leaves its intent open:
    the search finds it and hypothesis shrinks the schedule to one ticket and that one crash."""
    from healer.remedy import actions

    monkeypatch.setattr(actions, "recover", lambda ctx: [])
    failure = explore.explore(12, seed=5)
    assert failure is not None
    assert any("intents_settled" in m for m in failure.broken)
    s = failure.schedule
    assert s["tickets"] == ["succeeds"] and s["pool_size"] == 1 and s["duration"] == explore.DURATIONS[0]
    assert [f["fault"] for f in s["faults"]] == ["failpoint"]
    # the written schedule is an ordinary scenario: replayed from its seed it breaks the same way, event for event
    path = failure.write(tmp_path / "failing.yaml")
    assert failure.replay_command(path) == f"healer gameday replay --seed {s['seed']} {path}"
    a = engine.run(load(path), tmp_path / "a", seed=s["seed"])
    b = engine.run(load(path), tmp_path / "b", seed=s["seed"])
    assert not a.ok and [c.message for c in a.failures][0].startswith("expectation 'invariant(intents_settled)' broken")
    assert explore.event_log(a) == explore.event_log(b)


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_same_seed_same_event_log(tmp_path):
    for seed in (3, 11):
        sc = explore.scenario_for_seed(seed)
        a = engine.run(sc, tmp_path / f"{seed}a")
        b = engine.run(explore.scenario_for_seed(seed), tmp_path / f"{seed}b")
        assert a.status == b.status == "passed", a.error or [c.message for c in a.failures]
        la, lb = explore.event_log(a), explore.event_log(b)
        assert len(la) > 50 and la == lb


def test_seeded_schedules_are_a_pure_function_of_the_seed():
    assert explore.schedule_for_seed(42) == explore.schedule_for_seed(42)
    assert explore.schedule_for_seed(42) != explore.schedule_for_seed(43)
    kinds = {f["fault"] for s in range(200) for f in explore.schedule_for_seed(s)["faults"]}
    assert kinds == set(explore.timed_faults()) | {"failpoint"}
    assert set(explore.INVARIANTS) <= set(INVARIANTS)


@pytest.mark.long  # 28 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_replay_cli(tmp_path):
    # a seed alone: the seeded schedule
    r = healer("gameday", "replay", "--seed", "7", "--workdir", str(tmp_path / "w"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "explore-7" in r.stdout
    # a schedule file, as printed by a failing test (JSON)
    sched = tmp_path / "s.json"
    sched.write_text(json.dumps(explore.schedule_for_seed(9)))
    r = healer("gameday", "replay", "--schedule", str(sched), "--workdir", str(tmp_path / "w"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr + r.stdout
    # a bad one: one located line, exit 65, no traceback
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"seed": 1, "faults": []}))
    r = healer("gameday", "replay", "--schedule", str(bad), cwd=tmp_path)
    assert r.returncode == 65 and "Traceback" not in r.stderr
    assert r.stderr.strip().startswith(f"{bad}: expected a schedule with keys")
    r = healer("gameday", "replay", cwd=tmp_path)
    assert r.returncode == 64 and "expected --seed N" in r.stderr


@pytest.mark.long  # 37 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_explore_cli_reports_no_failure(tmp_path):
    r = healer("gameday", "explore", "-n", "3", "--seed", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "3 generated schedules: every invariant held" in r.stdout
