"""Every process, git and store fault of the real engine, on a real fleet with scripted agents
(chaos/agents/fleet_agent.py launched by the real dispatcher): each one is injected, heals or is
rolled back, and the run leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.engine import Result

FAULTS = """\
name: real-faults
mode: real
duration: 40s
tick: 1s
overrides:
  fleet:
    dispatch_tick: 1s
    pool_size: 2
    loop_command: ["{python}", "{agents_dir}/fleet_agent.py", --policy, "{policy}", --task, "{task_file}",
                   --workdir, "{workdir}", --root, "{root}", --run-id, "{run_id}", --hang-max, "20"]
    main_gates: [{name: green, run: ["{python}", -c, "import os, sys; sys.exit(1 if os.path.exists('RED') else 0)"]}]
  retry: {backoff: [1s], max_launches: 3}
  health: {stale_labels: {to-review: 1m}}
real:
  dispatcher: daemon
  until: {kind: main.green}
fleet:
  tickets:
    - {id: A-1, behaviour: "hang,success"}
    - {id: A-2, behaviour: succeeds}
    # blocked behind a ticket that is not on the board (it still blocks): only its stale label is healed here,
    # not the block (a free blocked ticket would be unblocked and done before its label goes stale)
    - {id: Z-1, state: blocked, age: 2h, blocked_by: [X-0]}
faults:
  # chained on events, not on wall-clock offsets: each fires right after the one before it, whatever the load
  - {on_event: dispatch.launched, subject: A-1, fault: stop_agent, target: A-1}
  - {on_event: chaos.fault, subject: A-1, nth: 1, fault: continue_agent, target: A-1}
  - {on_event: chaos.fault, subject: A-1, nth: 2, fault: kill_agent, target: A-1}
  - {at: 1s, fault: stop_dispatcher}
  - {at: 2s, fault: continue_dispatcher}
  - {at: 1s, fault: stale_labels, target: Z-1}
  - {at: 1s, fault: alert_flood, count: 30, params: {keys: 3}}
  - {at: 5s, fault: red_main}
  - {on_event: main.red, fault: green_main}   # main goes green only once the dispatcher saw it red
  - {on_event: dispatch.launched, subject: A-2, fault: index_lock, target: A-2}
  - {at: 9s, fault: clock_jump, seconds: 1h}
expect:
  - name: both tickets done in the end
    ticket_states: {A-*: [queued, in_progress, review, done]}
  - name: red seen
    event: {kind: main.red}
  - name: green seen
    event: {kind: main.green}
  - name: the killed agent's ticket went back to the queue
    event: {kind: ticket.moved, subject: A-1, payload: {from: in_progress, to: queued}}
  - name: stale label dropped
    labels: {match: Z-1, label: to-review, present: false}
  - name: the flood stays within quota
    notifications: {key: "flood:*", window: 4h, max_per_window: 1, max: 3}
  - invariant: one_live_agent_per_ticket
  - invariant: intents_settled
  - invariant: no_leftovers
"""


@pytest.fixture(scope="module")
def faults_run(tmp_path_factory) -> Result:
    from chaos import engine
    from chaos.scenario import load

    d = tmp_path_factory.mktemp("real-faults")
    p = d / "real-faults.yaml"
    p.write_text(FAULTS)
    return engine.run(load(p), d / "run")


def test_every_fault_is_injected(faults_run):
    r = faults_run
    assert r.error is None, r.stats.get("traceback")
    # injections are the `action` activities; the expectations (probes) are judged by the next test
    acts = {a.name: a for a in r.activities if a.type == "action"}
    bad = {n: a.output for n, a in acts.items() if a.status != "succeeded" or "could not" in str(a.output)}
    assert bad == {}
    assert "SIGSTOP" in str(acts["fault stop_agent on A-1"].output)
    assert "SIGKILL pids [" in str(acts["fault kill_agent on A-1"].output)
    assert "wall clock jumped +3600s" in str(acts["fault clock_jump"].output)  # chaos/faults/real_world.py


def test_the_fleet_heals_and_nothing_is_left(faults_run):
    r = faults_run
    assert r.ok, "\n".join(c.message for c in r.failures)
    kinds = [x.name for x in r.rollbacks]
    assert any("sigcont" in k for k in kinds) and any("remove_file" in k for k in kinds)


def test_the_clock_jump_reaches_every_healer_process(faults_run):
    """Real mode: the healer children read the jumped wall clock (healer/clock.py's offset file); the engine does not."""
    from healer.store import open_store

    store = open_store(Path(faults_run.stats["fleet"]))
    try:
        [jump] = [e for e in store.events(kinds=["chaos.fault"]) if e.payload["fault"] == "clock_jump"]
        later = [e.at - jump.at for e in store.events(after=jump.id, kinds=["supervisor.tick"])]
    finally:
        store.close()
    assert later and max(later) > 3500, later
