"""A dispatcher killed while main is red: noticed (dispatch_frozen, paused or not), and the fleet unfreezes
once a dispatcher runs again and sees main green. Plus: merges compare-and-set on the board."""

from __future__ import annotations

import socket

from healer import lifecycle
from healer.fleet.dispatcher import Dispatcher
from healer.fleet.process_runtime import ProcessRuntime
from healer.supervisor import Supervisor
from tests.fleet.conftest import NO_FILE, gate, scripted_policy
from tests.fleet.test_main_red import commit_on_main

DEAD_PID = 2**22 + 17  # above pid_max on the test machines: never alive


def _sup(f) -> Supervisor:
    return Supervisor(f.root, f.policy, f.store, f.clock, runtime=ProcessRuntime())


def _frozen(rep) -> list:
    return [x for x in rep.decision.findings if x.kind == "dispatch_frozen"]


def test_a_dead_dispatcher_behind_a_red_main_is_noticed_and_the_fleet_unfreezes(fleet_factory):
    f = fleet_factory(scripted_policy(main_gates=[gate("main-ok", NO_FILE.format("RED"))], pool_size=1))
    commit_on_main(f, add={"RED": "x\n"}, msg="break main")
    f.add("T-1", "success")
    assert f.d.tick().main == "red"
    assert f.store.get_setting("dispatch.paused") is True
    # the dispatcher dies (SIGKILL: its lease stays, held by a pid that is gone) and main is fixed meanwhile
    f.store.release_lease("dispatcher", f.d.holder)
    f.store.acquire_lease("dispatcher", f"dispatch@{socket.gethostname()}:{DEAD_PID}", DEAD_PID, socket.gethostname(), 90)
    commit_on_main(f, rm=["RED"], msg="fix main")
    f.clock.advance(f.policy.sentinels.dispatcher_silent - 1)
    assert _frozen(_sup(f).plan()) == []  # not yet: a pass can be late
    f.clock.advance(1)
    rep = _sup(f).tick()
    found = _frozen(rep)
    assert found and found[0].evidence["dispatcher"] == "silent" and found[0].evidence["dispatch_paused"] is True
    assert [e for e in f.events("notify.sent") if e.subject.startswith("dispatch_frozen")]
    d2 = Dispatcher(f.root, f.policy, f.store, f.clock, ProcessRuntime())  # restarted: takes the dead holder's lease
    rep = d2.tick()
    assert rep.main == "green" and rep.launched == [("T-1", "launch")]
    assert f.store.get_setting("dispatch.paused") is False
    assert _frozen(_sup(f).plan()) == []


ESCALATE_IN_GATE = (
    "import pathlib, sqlite3\n"
    "db = next(p / 'healer.db' for p in pathlib.Path.cwd().parents if (p / 'healer.db').exists())\n"
    "c = sqlite3.connect(str(db)); c.execute(\"UPDATE tickets SET state='needs_human' WHERE id='T-1'\"); c.commit()\n"
)


def test_no_merge_for_a_ticket_moved_while_its_merge_gates_ran(fleet_factory):
    """The gate itself escalates the ticket (as the supervisor did in the red-team trace) while it runs."""
    pol = scripted_policy(merge_gates=[gate("escalates-meanwhile", ESCALATE_IN_GATE)])
    # the gate plays the supervisor, so it must write the store: unconfined (merge gates are sandboxed by default)
    pol = pol.model_copy(update={"loop": pol.loop.model_copy(update={"sandbox": "none"})})
    f = fleet_factory(pol)
    f.add("T-1", "success")
    f.d.tick()
    f.settle()
    before = f.main_head()
    f.d.tick()
    assert f.main_head() == before, "merged behind the board's back"
    assert f.state("T-1") == lifecycle.NEEDS_HUMAN
    assert f.events("proposal.withheld") and not f.events("proposal.merged")
