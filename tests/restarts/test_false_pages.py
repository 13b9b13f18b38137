"""No false pages: on restart, on success, on a human's reopen; `status` never shows a dead agent as live.

Each test here failed on main before the restarts issue (#13): a real fleet (git, SQLite, the scripted
loop stand-in as real child processes), the real Dispatcher and Supervisor on a shared store.
"""

from __future__ import annotations

from healer import lifecycle
from healer.fleet.dispatch_board import handle_of
from healer.fleet.dispatcher import Dispatcher
from healer.fleet.process_runtime import ProcessRuntime
from healer.fleet.status import fleet_status
from healer.store import keys
from healer.supervisor import Supervisor
from tests.conftest import wait_until
from tests.fleet.conftest import scripted_policy


def _sup(f) -> Supervisor:
    # its own runtime: the supervisor never sees the dispatcher's children as its own (another process's view)
    return Supervisor(f.root, f.policy, f.store, f.clock, runtime=ProcessRuntime())


def _pages(f, key: str) -> list:
    return [e for e in f.events("notify.sent") if e.subject.startswith(key)]


def _kinds(rep) -> set[str]:
    return {x.kind for x in rep.decision.findings}


def _exited(f, tid: str) -> None:
    """Wait until the ticket's agent process has ended (its result written), without reaping it."""
    a = f.running(tid)[0]
    wait_until(lambda: f.d.runtime.status(handle_of(a)).state != "running", 30, f"{tid}'s agent to end")


def test_a_restarted_supervisor_does_not_page_about_its_own_downtime(fleet_factory):
    f = fleet_factory(scripted_policy())
    f.store.set_setting(keys.SUPERVISOR_LAST_TICK, f.clock.now() - 3600)  # `up` was down for an hour
    rep = _sup(f).tick()
    assert "supervisor_silent" not in _kinds(rep)
    assert _pages(f, "supervisor_silent") == []


def test_a_restarted_dispatcher_pages_only_the_silence_it_watched(fleet_factory):
    f = fleet_factory(scripted_policy())
    f.store.set_setting(keys.SUPERVISOR_LAST_TICK, f.clock.now() - 3600)
    f.d.tick()  # the first pass after a restart: the hour before it was healer's downtime, not the supervisor's
    assert _pages(f, "supervisor_silent") == []
    f.clock.advance(f.policy.sentinels.supervisor_silent)  # then the supervisor stays silent while we watch
    f.d.tick()
    assert len(_pages(f, "supervisor_silent")) == 1


def test_an_agent_that_exited_0_is_neither_dead_nor_resumed(fleet_factory):
    f = fleet_factory(scripted_policy())
    f.add("T-1", "success")
    f.d.tick()
    _exited(f, "T-1")
    f.clock.advance(600)  # past every grace the supervisor gives the dispatcher
    rep = _sup(f).tick()
    assert "agent_dead" not in _kinds(rep)
    assert [i for i in f.store.intents() if i.action == "resume_agent"] == []
    assert f.state("T-1") == lifecycle.IN_PROGRESS and f.running("T-1")  # nobody called it lost
    f.d.tick()
    assert f.state("T-1") == lifecycle.DONE
    assert len(f.store.attempts("T-1")) == 1


def test_after_a_restart_the_supervisor_does_not_race_the_dispatchers_reap(fleet_factory):
    """The red-team trace: `up` restarted after its agents exited 0; the supervisor ticked first, marked them
    lost and requeued them; the dispatcher relaunched finished work; escalate-same-commit fired."""
    f = fleet_factory(scripted_policy())
    for i in range(1, 4):
        f.add(f"T-{i}", "success")
    f.d.tick()
    for i in range(1, 4):
        _exited(f, f"T-{i}")
    f.clock.advance(1800)  # `up` was SIGKILLed and stays down half an hour
    sup = _sup(f)
    sup.tick()
    d2 = Dispatcher(f.root, f.policy, f.store, f.clock, ProcessRuntime())  # the restarted dispatcher: not their parent
    d2.tick()
    sup.tick()
    for i in range(1, 4):
        assert f.state(f"T-{i}") == lifecycle.DONE, f.store.events(kinds=["ticket.moved"], subject=f"T-{i}")
        assert len(f.store.attempts(f"T-{i}")) == 1
    assert [e for e in f.events("remedy.done") if e.payload.get("action") in ("resume_agent", "escalate")] == []
    assert f.store.agents(states=["lost"]) == []


def test_a_reopened_ticket_is_not_a_zombie(fleet_factory):
    f = fleet_factory(scripted_policy())
    f.add("T-1", "success")
    f.d.tick()
    f.settle()
    f.d.tick()
    assert f.state("T-1") == lifecycle.DONE
    f.store.move_ticket("T-1", lifecycle.QUEUED, actor="human", reason="not quite: redo it")
    rep = _sup(f).plan()
    assert "zombie_ticket" not in _kinds(rep)
    assert not [a for a in rep.decision.actions if a.action == "close_dead_ticket"]


def test_a_ticket_queued_with_merged_work_is_still_a_zombie(fleet_factory):
    f = fleet_factory(scripted_policy())
    f.add("T-1", "success", data={"merged_commit": f.main_head()})
    assert "zombie_ticket" in _kinds(_sup(f).plan())


def test_status_does_not_list_a_dead_agent_as_live(fleet_factory):
    f = fleet_factory(scripted_policy())
    f.add("T-1", "success")
    f.d.tick()
    _exited(f, "T-1")
    st = fleet_status(f.store, f.policy, f.clock.now())
    assert [a["id"] for a in st["agents"]] == []
    assert [a["ticket"] for a in st["ended_agents"]] == ["T-1"] and st["ended_agents"][0]["exit_code"] == 0
