"""Acceptance 1: the real dispatcher runs its agents as containers; the real supervisor
sees a killed container as a dead agent (resumed) and a paused one as stuck at its
threshold (stopped). Faults come from chaos.faults.containers; state is read via the SDK."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chaos.faults import containers as cf
from healer.clock import VirtualClock
from healer.fleet.container_runtime import ContainerRuntime
from healer.fleet.dispatcher import Dispatcher
from healer.policy.schema import Policy
from healer.store import open_store
from healer.supervisor import Supervisor
from tests.conftest import make_repo, wait_until
from tests.docker.conftest import require_engine, state_of

pytestmark = pytest.mark.docker
require_engine()
REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "chaos" / "agents" / "fleet_agent.py"
IDLE = 600.0  # health.agent_idle: a paused agent is stuck at this threshold


def policy() -> Policy:
    cmd = [sys.executable, str(AGENT), "--policy", "{policy}", "--task", "{task_file}", "--workdir", "{workdir}",
           "--root", "{root}", "--run-id", "{run_id}", "--hang-max", "120"]
    return Policy.model_validate({
        "fleet": {"runtime": "container", "image": "healer-python", "loop_command": cmd, "pool_size": 4},
        "loop": {"kill_grace": "2s"}, "health": {"agent_idle": "10m", "agent_stuck": "30m"},
        "retry": {"backoff": ["5m"], "max_launches": 5},
        # a dispatcher silent for a minute is away: the supervisor may then judge its agents (issue 13)
        "sentinels": {"dispatcher_silent": "60s"},
        "notify": {"notifiers": [{"kind": "jsonl", "path": ".healer/notifications.jsonl"}]}})


@pytest.fixture
def fleet(tmp_path, dclient):
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir()
    clock = VirtualClock()
    store = open_store(root, clock)
    pol = policy()
    d = Dispatcher(root, pol, store, clock, ContainerRuntime(client=dclient))
    s = Supervisor(root, pol, store, clock, ContainerRuntime(client=dclient))
    yield root, clock, store, d, s
    d.stop_agents(grace=1.0)
    for c in dclient.containers.list(all=True, filters={"label": f"healer.fleet={root}"}):
        c.remove(force=True)
    store.close()


def running(store, tid):
    return [a for a in store.agents(states=["running"]) if a.ticket_id == tid]


def ready(root: Path, tid: str, run_id: str) -> bool:
    return any((root / ".healer" / "worktrees" / tid / ".healer" / "runs" / run_id).glob("ready.*"))


def test_killed_container_resumed_paused_container_stopped(fleet, dclient, tmp_path):
    root, clock, store, d, s = fleet
    for tid in ("T1", "T2", "T3"):
        store.add_ticket(f"ticket {tid}", id=tid, body="behaviour: hang\n")
    rep = d.tick()
    assert sorted(t for t, _ in rep.launched) == ["T1", "T2", "T3"]
    agents = {a.ticket_id: a for a in store.agents(states=["running"])}
    for tid, a in agents.items():
        assert a.kind == "container" and a.container
        labels = dclient.api.inspect_container(a.container)["Config"]["Labels"]
        assert labels["healer.fleet"] == str(root) and labels["healer.ticket"] == tid and labels["healer.run"] == a.run_id
        wait_until(lambda a=a: ready(root, a.ticket_id, a.run_id), what=f"{tid}'s agent running in its container")

    # -- a container killed mid-run while the dispatcher is away: it has an exit status, so the supervisor
    # leaves it to the dispatcher to record (reap before you judge, issue 13) and calls nothing lost
    [k] = cf.kill(name=agents["T1"].container, client=dclient)
    assert (k.before, k.after) == ("running", "exited")
    clock.advance(61)
    rep = s.tick()
    assert ("agent_dead", "T1") not in [(f.kind, f.subject) for f in rep.decision.findings]
    assert not [a for a, _ in rep.outcomes if a.action == "resume_agent"]

    # -- a container killed mid-run, seen by the dispatcher first: exit -9, like a SIGKILLed process
    cf.kill(name=agents["T3"].container, client=dclient)
    # -- a paused container: alive but paused; stuck once agent_idle passes without progress
    journal = cf.UndoJournal(tmp_path / "undo.jsonl")
    [p] = cf.pause(name=agents["T2"].container, journal=journal, client=dclient)
    assert (p.before, p.after) == ("running", "paused")

    clock.advance(IDLE / 2 - 61)
    rep = d.tick()
    assert agents["T3"].id in rep.reaped and agents["T1"].id in rep.reaped
    t3 = store.agent(agents["T3"].id)
    assert (t3.state, t3.exit_code) == ("lost", -9)
    assert state_of(dclient, agents["T3"].container) == "gone"  # the dead one was removed once recorded

    rep = s.tick()
    views = {v.agent.ticket_id: v for v in rep.snapshot.agents if v.agent.state == "running"}
    assert views["T2"].alive is True and views["T2"].paused is True
    assert ("agent_stuck", "T2") not in [(f.kind, f.subject) for f in rep.decision.findings]  # not yet due

    clock.advance(IDLE / 2 + 1)  # past the launch backoff (5m) of both
    launched = dict(d.tick().launched)
    assert "T1" in launched and "T3" in launched
    for tid in ("T1", "T3"):  # both back in containers, in their own worktrees
        [a] = running(store, tid)
        assert a.kind == "container" and a.container != agents[tid].container
        assert a.worktree == agents[tid].worktree
        wait_until(lambda a=a: state_of(dclient, a.container) == "running", what=f"{tid} relaunched")
    rep = s.tick()
    stuck = [f for f in rep.decision.findings if (f.kind, f.subject) == ("agent_stuck", "T2")]
    assert stuck and stuck[0].evidence.get("paused") is True
    assert ("stop_agent", "done") in [(a.action, o.status) for a, o in rep.outcomes]
    assert state_of(dclient, agents["T2"].container) == "exited"  # stopped through the SDK, not left paused
    assert store.agent(agents["T2"].id).state == "stopped"
    assert store.ticket("T2").state == "queued"

    # the end of the game day: nothing paused is left behind
    cf.cleanup(str(root), journal=journal, client=dclient)
    assert not dclient.containers.list(filters={"label": f"healer.fleet={root}", "status": "paused"})
    assert journal.pending() == []
