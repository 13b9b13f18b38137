"""Real mode: the faults that were simulated-only (same_commit_repush, broken_proposal) on real processes and
real git, and a real run's deterministic part (its fault schedule: which ticket, which moment; its agents'
scripts) replayed from its seed: two runs with one seed journal the same schedule."""

from __future__ import annotations

import pytest

from chaos.engine import Result

SCENARIO = """\
name: real-seeded
mode: real
seed: 7
duration: 60s
timeout: 90s
tick: 1s
overrides:
  fleet:
    dispatch_tick: 1s
    pool_size: 4
    loop_command: ["{python}", "{agents_dir}/fleet_agent.py", --policy, "{policy}", --task, "{task_file}",
                   --workdir, "{workdir}", --root, "{root}", --run-id, "{run_id}", --hang-max, "20"]
    merge_gates: [{name: no-broken, run: ["{python}", -c, "import os, sys; sys.exit(1 if os.path.exists('BROKEN') else 0)"]}]
  retry: {backoff: [1s], max_launches: 4}
real:
  dispatcher: daemon
  settle_ticks: 2
fleet:
  random_tickets: 2
  tickets:
    - {id: S-, count: 3, behaviour: succeeds}
    - {id: B-1, behaviour: succeeds}
faults:
  # at 0s: before any healer process runs, so the first run already plays the script
  - {at: 0s, fault: same_commit_repush, target: "S-*", pick: 1}
  - {at: 0s, fault: broken_proposal, target: B-1}
  - {at: 1s, jitter: 2s, fault: alert_flood, count: 3, params: {keys: 1}}
expect:
  - name: the picked ticket escalated on its repeated commit, the others done
    tickets: {match: "S-*", state: done, equals: 2}
  - name: the broken proposal rejected by the merge gate
    event: {kind: proposal.rejected, subject: B-1}
  - name: the broken proposal never merged
    never: {kind: proposal.merged, subject: B-1}
  - invariant: one_live_agent_per_ticket
  - invariant: intents_settled
  - invariant: no_leftovers
"""


def _run(tmp_path_factory, name: str, duration: str | None = None) -> tuple[Result, list]:
    from chaos import engine
    from chaos.scenario import load
    from healer.store import open_store

    d = tmp_path_factory.mktemp(name)
    p = d / "real-seeded.yaml"
    p.write_text(SCENARIO if duration is None else SCENARIO.replace("duration: 60s", f"duration: {duration}"))
    r = engine.run(load(p), d / "run")
    store = open_store(d / "run" / "fleet")
    try:
        events = store.events(kinds=["chaos.schedule", "chaos.fault", "ticket.moved"])
    finally:
        store.close()
    return r, events


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    # the second run only lasts until every timed fault has fired (the last one by 3 s): the deterministic part of
    # a run is decided by then, whatever happens after it
    return _run(tmp_path_factory, "seeded-a"), _run(tmp_path_factory, "seeded-b", duration="5s")


@pytest.mark.long  # 24 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_the_once_simulated_only_faults_heal_in_real_mode(two_runs):
    (r, events), _ = two_runs
    assert r.error is None, r.stats.get("traceback")
    assert r.ok, "\n".join(c.message for c in r.failures)
    [picked] = [e.subject for e in events if e.kind == "chaos.fault" and e.payload["fault"] == "same_commit_repush"]
    moved = [e.payload["to"] for e in events if e.kind == "ticket.moved" and e.subject == picked]
    assert moved[-1] in ("needs_human", "blocked"), moved


def _deterministic(events) -> tuple:
    [sched] = [e.payload for e in events if e.kind == "chaos.schedule"]
    injected = sorted((e.payload["fault"], e.payload["target"] or "") for e in events if e.kind == "chaos.fault")
    return sched, injected


@pytest.mark.long  # 21 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_one_seed_one_schedule(two_runs):
    (_, a), (_, b) = two_runs
    sa, ia = _deterministic(a)
    assert sa == _deterministic(b)[0] and ia == _deterministic(b)[1]
    assert sa["seed"] == 7 and set(sa["tickets"]) == {"S-1", "S-2", "S-3", "B-1", "R-1", "R-2"}
    [flood] = [f for f in sa["faults"] if f["fault"] == "alert_flood"]
    assert 1.0 <= flood["at"] <= 3.0


def test_another_seed_draws_another_schedule():
    from chaos.faults.schedule import describe, resolve
    from chaos.scenario_parts import Fault

    faults = [Fault(fault="kill_agent", at=10, jitter=60, target="T-*", pick=2)]
    tickets = [f"T-{i}" for i in range(10)]
    runs = {s: describe(resolve(faults, tickets, s)) for s in range(5)}
    assert runs[3] == describe(resolve(faults, tickets, 3))
    assert len({str(v) for v in runs.values()}) > 1
    assert all(len(v) == 2 and 10 <= v[0]["at"] <= 70 for v in runs.values())
