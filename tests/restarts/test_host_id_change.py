"""A host that comes back under a new id (issue 40, item 4): HEALER_HOST_ID changed across a restart.

Measured on main before: a ticket launched before the restart stayed `in_progress` for minutes with its agent
row `running`, though the process had exited 0 and committed: the reaper looks only at rows of its own host id,
the orphan check skips a ticket that has a running row, and in a one-host fleet there is no host lease whose
expiry would ever hand it to anyone. The same machine is now recognised by the machine identity recorded with
each row (this boot, this fleet root: healer/fleet/lost_hosts.py machine_id), so the new id takes them back.
"""

from __future__ import annotations

import pytest

from healer import lifecycle, procs
from healer.fleet.dispatcher import Dispatcher
from healer.fleet.process_runtime import ProcessRuntime
from tests.conftest import wait_until
from tests.fleet.conftest import scripted_policy


def _settle(d: Dispatcher, f, tickets: list[str], rounds: int = 4) -> None:
    for _ in range(rounds):
        d.tick()
        if all(f.state(t) == lifecycle.DONE for t in tickets):
            return


@pytest.mark.parametrize("agents", ["exited", "running"])
def test_a_host_back_under_a_new_id_ends_what_it_ran_before_once(fleet_factory, monkeypatch, agents):
    """Two tickets launched as host-a; the dispatcher dies and comes back as host-b on the same machine and fleet
    root, the agents either already exited 0 (committed) or still running. host-b takes both back and ends each
    once: done, one attempt each, no agent row left running; with the take-back switched off (what main did) the
    tickets stay in progress behind a `running` row of an exited process."""
    monkeypatch.setenv("HEALER_HOST_ID", "host-a")
    monkeypatch.setenv("HEALER_FLEET_DELAY", "0" if agents == "exited" else "1.5")
    f = fleet_factory(scripted_policy())
    f.add("T-1")
    f.add("T-2")
    f.d.tick()
    before = f.running()
    assert sorted(a.ticket_id for a in before) == ["T-1", "T-2"] and {a.host for a in before} == {"host-a"}
    assert all(a.data.get("machine") for a in before)
    if agents == "exited":  # both exited 0 and committed while no dispatcher was there to see it
        wait_until(lambda: not any(procs.alive(a.pid) for a in before), 60, "the agents exited")

    # the restart: the old dispatcher is gone without a word (SIGKILL), the host's id is another now. (Both run in
    # this process, so its fleet lease names a live pid: it is left to expire, as a dead holder's would be taken.)
    f.clock.advance(120)
    monkeypatch.setenv("HEALER_HOST_ID", "host-b")
    b = Dispatcher(f.root, f.policy, f.store, f.clock, ProcessRuntime())
    assert b.host == "host-b" and b.machine == f.d.machine
    if agents == "exited":
        monkeypatch.setenv("HEALER_SWITCHES_OFF", "host_takeback")
        assert b.tick().skipped is None
        b.tick()
        assert [f.state(t) for t in ("T-1", "T-2")] == [lifecycle.IN_PROGRESS] * 2, "the issue's symptom, with main's behaviour"
        assert len(f.running()) == 2
        monkeypatch.delenv("HEALER_SWITCHES_OFF")
    b.tick()
    taken = f.events("dispatch.host_taken_back")
    assert sorted((e.payload["agent"], e.payload["from"], e.payload["to"]) for e in taken) == \
        sorted((a.id, "host-a", "host-b") for a in before)
    assert sorted(e.subject for e in taken) == sorted(a.ticket_id for a in before)  # on each ticket's timeline
    if agents == "running":
        assert {a.host for a in f.running()} == {"host-b"}  # adopted, still running: not requeued, not killed
        wait_until(lambda: not any(procs.alive(a.pid) for a in before), 60, "the agents exited")
    _settle(b, f, ["T-1", "T-2"])
    assert [f.state(t) for t in ("T-1", "T-2")] == [lifecycle.DONE] * 2
    assert [len(f.store.attempts(t)) for t in ("T-1", "T-2")] == [1, 1]  # ended once: nothing launched again
    assert all(x.ended_at is not None and x.exit_code == 0 for t in ("T-1", "T-2") for x in f.store.attempts(t))
    assert f.running() == []
    assert not f.events("host.reclaimed")


def test_rows_of_another_machine_or_a_live_host_are_not_taken_back(fleet_factory, monkeypatch):
    """Only this machine's rows, of a host id nobody holds now: another machine's agent (a pid there means
    nothing here) and a host whose lease a live dispatcher holds keep theirs."""
    from healer.core import hosts

    class A:
        def __init__(self, id, host, machine, state="running"):
            self.id, self.host, self.state, self.ticket_id = id, host, state, id
            self.data = {"machine": machine} if machine else {}

    rows = [A("a1", "old", "m-1"), A("a2", "old", "m-2"), A("a3", "live", "m-1"), A("a4", "me", "m-1"), A("a5", "old", None)]
    tb = hosts.taken_back(rows, [], "me", "m-1", live_hosts=["live"])
    assert tb.agents == ("a1",)
    assert hosts.taken_back(rows, [], "me", "", live_hosts=[]).agents == ()


def test_a_second_live_host_on_the_same_machine_keeps_its_agents(tmp_path, monkeypatch):
    """Two dispatchers on one machine and fleet root (fleet.shared_remote: several hosts), both alive. host-b's
    take-back must leave host-a's running agent alone while host-a holds its host lease (healer/core/hosts.py
    taken_back: a live host keeps its rows): no `dispatch.host_taken_back`, the agent still host-a's, one attempt."""
    from healer.clock import VirtualClock
    from healer.policy.schema import Policy
    from healer.store import open_store
    from tests.conftest import git, make_repo

    seed = make_repo(tmp_path / "seed")
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(tmp_path / "shared.git"))
    root = tmp_path / "fleet"
    git(tmp_path, "clone", "-q", str(tmp_path / "shared.git"), str(root))
    (root / ".healer").mkdir()
    data = scripted_policy().model_dump(mode="json", by_alias=True)
    data["fleet"]["shared_remote"] = "origin"
    pol = Policy.model_validate(data)
    clock = VirtualClock()
    store = open_store(root, clock)
    monkeypatch.setenv("HEALER_FLEET_DELAY", "30")  # the agent runs through the test
    monkeypatch.setenv("HEALER_HOST_ID", "host-a")
    a = Dispatcher(root, pol, store, clock, ProcessRuntime())
    monkeypatch.setenv("HEALER_HOST_ID", "host-b")
    b = Dispatcher(root, pol, store, clock, ProcessRuntime())
    try:
        assert a.machine and a.machine == b.machine
        store.add_ticket("work", id="T-1", body="behaviour: success\n")
        assert a.tick().launched == [("T-1", "launch")]
        (agent,) = store.agents(states=["running"])
        assert agent.host == "host-a"
        clock.advance(5)
        assert b.tick().skipped is None
        assert store.events(kinds=["dispatch.host_taken_back"]) == []
        assert [x.host for x in store.agents(states=["running"])] == ["host-a"]
        assert store.ticket("T-1").state == lifecycle.IN_PROGRESS and len(store.attempts("T-1")) == 1
    finally:
        a.stop_agents(grace=1.0)
        store.close()
