"""Attempt endings (healer/core/endings.py): the infrastructure's endings count against no budget and fire
no escalation; the agent's own still do. The pure table, its properties, and a real dispatcher reaping
real processes that end like a loop runner whose store blinked."""

from __future__ import annotations

import errno
import sqlite3
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from healer.core import dispatch as core
from healer.core import endings as en
from healer.core.plan import detect
from healer.errors import HostTrouble, StoreUnavailable
from healer.fleet.snapshot import gather
from healer.git import GitError
from healer.loop.runner import _cause_of
from healer.records import Attempt, Ticket
from healer.sandbox import SandboxFailed
from tests.fleet.conftest import scripted_policy

# -- the table ---------------------------------------------------------------------------------------

TABLE = [
    # (exit code, result cause, runner words, interrupted) -> (kind, cause)
    ((0, None, "", False), (en.CLEAN, None)),
    ((1, None, "gates failed", False), (en.AGENT, None)),
    ((2, None, "", False), (en.AGENT, None)),
    ((74, None, "", False), (en.INFRA, en.DISK_FULL)),
    ((69, en.STORE_UNAVAILABLE, "", False), (en.INFRA, en.STORE_UNAVAILABLE)),
    ((69, en.SANDBOX_START, "", False), (en.INFRA, en.SANDBOX_START)),
    ((69, None, "healer: cannot connect: the database system is shutting down", False), (en.INFRA, en.STORE_UNAVAILABLE)),
    ((70, None, "healer: internal error: OperationalError: database is locked", False), (en.INFRA, en.STORE_BUSY)),
    ((70, None, "healer: internal error: OSError: [Errno 28] No space left on device", False), (en.INFRA, en.DISK_FULL)),
    ((70, None, "fatal: Unable to create '/w/.git/index.lock': File exists.", False), (en.INFRA, en.GIT_LOCK)),
    ((69, None, "sandbox bwrap failed to start agent: bwrap: setting up uid map: Permission denied", False),
     (en.INFRA, en.SANDBOX_START)),
    ((69, None, "agent: claude: command not found", False), (en.AGENT, None)),  # a setup problem is not the infra's
    ((70, None, "internal error: KeyError: 'x'", False), (en.AGENT, None)),
    ((1, en.STORE_UNAVAILABLE, "database is locked", False), (en.AGENT, None)),  # only the runner's own exits
    ((-9, None, "", False), (en.AGENT, None)),  # an agent may SIGKILL itself
    ((None, None, "", False), (en.AGENT, None)),
    ((None, None, "", True), (en.INFRA, en.HOST_EVENT)),  # lost with its dispatcher or host
    ((69, "made-up", "", False), (en.AGENT, None)),  # an unknown cause is not trusted
    # issue 40: a read-only or failed-over database, a model endpoint that only failed
    ((70, None, "healer: internal error: ReadOnlySqlTransaction: cannot execute INSERT in a read-only transaction",
      False), (en.INFRA, en.STORE_UNAVAILABLE)),
    ((69, None, "healer: loop x: the store stayed unavailable for 61s (writing loop.ended): ...", False),
     (en.INFRA, en.STORE_UNAVAILABLE)),
    ((69, en.MODEL_UNAVAILABLE, "", False), (en.INFRA, en.MODEL_UNAVAILABLE)),
    ((69, None, "healer: claude: model endpoint unavailable (7 failed requests, last: 529 overloaded)", False),
     (en.INFRA, en.MODEL_UNAVAILABLE)),
    ((3, en.MODEL_UNAVAILABLE, "model endpoint unavailable", False), (en.AGENT, None)),  # the loop's own verdict
]


@pytest.mark.parametrize(("given_", "want"), TABLE, ids=[f"{g[0]}-{g[1]}-{w[1]}" for g, w in TABLE])
def test_the_classification_table(given_, want):
    code, cause, text, interrupted = given_
    e = en.classify(code, cause=cause, text=text, interrupted=interrupted)
    assert (e.kind, e.cause) == want


def test_every_cause_has_a_line_and_the_signature_names_it():
    assert len({c.name for c in en.CAUSES}) == len(en.CAUSES) and all(c.what for c in en.CAUSES)
    sig = en.classify(74, text="healer: no space left on device\n  again").signature()
    assert sig == "infra: disk_full: healer: no space left on device again" and en.is_infra(sig)
    assert not en.is_infra("exit 1") and not en.is_infra(None) and not en.is_infra("infrastructure")


def test_the_runner_names_the_cause_of_the_errors_it_ends_on():
    assert _cause_of(SandboxFailed("bwrap", "agent", "bwrap: no permission")) == en.SANDBOX_START
    assert _cause_of(StoreUnavailable("store: cannot connect")) == en.STORE_UNAVAILABLE
    assert _cause_of(sqlite3.OperationalError("database is locked")) == en.STORE_BUSY
    assert _cause_of(sqlite3.OperationalError("database or disk is full")) == en.DISK_FULL
    assert _cause_of(OSError(errno.ENOSPC, "No space left on device")) == en.DISK_FULL
    assert _cause_of(HostTrouble("the host took no more writes")) == en.DISK_FULL
    assert _cause_of(GitError("fatal: Unable to create '/w/.git/index.lock': File exists.")) == en.GIT_LOCK
    assert _cause_of(KeyError("x")) is None and _cause_of(ValueError("malformed")) is None
    from healer.loop.agenthome import ModelUnavailable
    from healer.store.outage import StoreGone

    assert _cause_of(ModelUnavailable("claude: model endpoint unavailable")) == en.MODEL_UNAVAILABLE
    assert _cause_of(StoreGone("the store has been unavailable for 200s")) == en.STORE_UNAVAILABLE


codes = st.one_of(st.none(), st.integers(-64, 255))
causes = st.one_of(st.none(), st.sampled_from([c.name for c in en.CAUSES]), st.text(max_size=12))
texts = st.one_of(st.just(""), st.sampled_from([p for c in en.CAUSES for p in c.patterns]), st.text(max_size=80))


@given(codes, causes, texts)
def test_only_the_runners_own_exits_or_a_host_event_are_the_infrastructures(code, cause, text):
    e = en.classify(code, cause=cause, text=text)
    if code == 0:
        assert e.kind == en.CLEAN
    elif code not in en.RUNNER_EXITS:
        assert e.kind == en.AGENT  # whatever the agent printed or wrote
    else:
        assert e.kind in (en.AGENT, en.INFRA)
        if e.infra:
            assert e.cause in en.BY_NAME and e.cause != en.HOST_EVENT
    if e.infra:
        assert en.is_infra(e.signature())
    assert en.classify(code, cause=cause, text=text, interrupted=True).cause == en.HOST_EVENT


# -- the plan: budgets, backoff, escalation ----------------------------------------------------------

def _att(i, code, sig, head="h1", kind="launch", run=None, at=None):
    at = float(i * 100) if at is None else at
    return Attempt(id=i, ticket_id="T-1", kind=kind, at=at, run_id=run or f"T-1-{i:02d}", ended_at=at + 10,
                   exit_code=code, failure_signature=sig, state_hash="s1", head=head)


INFRA_SIG = en.Ending(en.INFRA, en.STORE_UNAVAILABLE, "cannot connect").signature()


def _plan(atts, now):
    t = Ticket(id="T-1", title="t", state="queued", priority=2, created_at=0.0, updated_at=0.0)
    return core.decide(core.DispatchInput(now=now, tickets=[t], attempts={"T-1": atts}), core.RetryRules())


@given(st.lists(st.booleans(), min_size=1, max_size=12))
def test_infra_attempts_are_never_counted_and_agent_ones_always_are(flags):
    atts = [_att(i, 69 if f else 1, INFRA_SIG if f else "exit 1") for i, f in enumerate(flags, 1)]
    assert [a.id for a in core.counted(atts)] == [a.id for a, f in zip(atts, flags, strict=True) if not f]
    p = _plan(atts, now=1e9)
    agent_failures = flags.count(False)
    assert bool(p.stops) == (agent_failures >= 5)  # max_launches counts the agent's attempts only


def test_many_infra_endings_from_one_commit_wait_and_retry_but_never_stop():
    atts = [_att(i, 69, INFRA_SIG) for i in range(1, 9)]
    last_end = atts[-1].ended_at
    p = _plan(atts, now=last_end + 299)
    assert not p.stops and [w.reason for w in p.waiting] == [core.BACKOFF] and p.waiting[0].eligible_at == last_end + 300
    p = _plan(atts, now=last_end + 300)
    # exit 69 (a service the run needed was away) keeps the run: it goes on where it was, inside the session window
    assert [(x.ticket_id, x.kind, x.run_id) for x in p.launches] == [("T-1", core.RESUME, "T-1-08")]
    assert core.infra_backoff_until(atts[:1], (30.0, 60.0)) == atts[0].ended_at + 30
    assert core.infra_backoff_until([*atts, _att(9, 1, "exit 1")], (30.0,)) is None


def test_a_model_or_store_outage_ending_is_resumed_and_not_counted():
    for cause in (en.MODEL_UNAVAILABLE, en.STORE_UNAVAILABLE):
        a = _att(1, 69, en.classify(69, cause=cause).signature())
        assert core.died(a) and core.infra(a) and core.counted([a]) == []
        assert core.resumable([a], now=20.0, ttl=3600.0) == "T-1-01"


def test_a_runner_killed_with_its_dispatcher_is_interrupted_not_the_agents():
    # healer's own restart took the runner along (SIGKILL of its process group, its dispatcher dead meanwhile)
    for code in (None, -9, -15):
        sig = core.interrupted_signature(code, stopped=False, launcher_died=True)
        assert sig and sig.startswith(core.INTERRUPTED) and core.counted([_att(1, code, sig)]) == []
    assert core.interrupted_signature(-9, stopped=False, launcher_died=False) is None  # an agent may kill itself
    assert core.interrupted_signature(-9, stopped=True, launcher_died=True) is None  # the supervisor stopped it


def test_a_disk_full_ending_is_resumed_and_not_counted():
    a = _att(1, 74, en.classify(74).signature())
    assert core.died(a) and core.infra(a) and core.counted([a]) == []
    assert core.resumable([a], now=20.0, ttl=3600.0) == "T-1-01"


# -- a real dispatcher reaping real processes --------------------------------------------------------

RUNNER = r'''
import json, os, sys
a = sys.argv
workdir, run_id, task = a[a.index("--workdir") + 1], a[a.index("--run-id") + 1], a[a.index("--task") + 1]
mode = open(task).read().split("mode: ")[1].split()[0]
def result(code, reason, cause=None):
    d = os.path.join(workdir, ".healer", "runs", run_id)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "result.json"), "w") as f:
        json.dump({"run_id": run_id, "exit_code": code, "reason": reason, "cause": cause}, f)
    sys.exit(code)
if mode == "store69":    # the runner's store blinked: it says so in its result
    result(69, "store: cannot connect: the database system is shutting down", "store_unavailable")
if mode == "locked70":   # the runner could not even write its result: its one line says why
    print("healer: internal error: OperationalError: database is locked", file=sys.stderr)
    sys.exit(70)
if mode == "agent69":    # a setup problem of the agent's (no CLI): the agent's, escalated
    result(69, "agent: claude: command not found")
result(1, "gates failed: tests")
'''


@pytest.fixture
def runner_fleet(fleet_factory, tmp_path):
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    policy = scripted_policy(backoff=["1s"])
    policy.fleet.loop_command = [sys.executable, str(script), "--task", "{task_file}", "--workdir", "{workdir}",
                                 "--run-id", "{run_id}"]
    return fleet_factory(policy)


def _cycle(f, wait: float) -> None:
    f.d.tick()  # launch
    f.settle()
    f.d.tick()  # reap
    f.clock.advance(wait)


@pytest.mark.parametrize("mode", ["store69", "locked70"])
def test_a_runner_ending_for_the_infrastructure_from_the_same_commit_never_escalates(runner_fleet, mode):
    f = runner_fleet
    f.store.add_ticket("t", id="T-1", body=f"mode: {mode}\n")
    for wait in (30, 60, 120, 300, 300, 300, 300):  # more than max_launches (5)
        _cycle(f, wait)
    assert f.state("T-1") == "queued"
    atts = f.store.attempts("T-1")
    assert len(atts) == 7 and all(core.infra(a) for a in atts) and len({a.head for a in atts}) == 1
    evs = f.events("attempt.infra", "T-1")
    assert len(evs) == 7 and {e.payload["cause"] for e in evs} == {"store_unavailable" if mode == "store69" else "store_busy"}
    assert not f.events("dispatch.budget_exhausted")
    found = detect(gather(f.root, f.store, f.policy, f.clock, f.d.runtime), f.policy)
    assert not [x for x in found if x.kind == "same_commit_repush"], found


def test_the_agents_own_failures_from_the_same_commit_still_escalate(runner_fleet):
    f = runner_fleet
    f.store.add_ticket("t", id="T-1", body="mode: agent69\n")
    _cycle(f, 2)
    _cycle(f, 2)
    found = detect(gather(f.root, f.store, f.policy, f.clock, f.d.runtime), f.policy)
    assert [x.subject for x in found if x.kind == "same_commit_repush"] == ["T-1"], found
    for _ in range(3):
        _cycle(f, 2)
    f.d.tick()
    assert f.state("T-1") == "needs_human" and not f.events("attempt.infra")


def test_the_backoff_is_waited_between_infra_retries(runner_fleet):
    f = runner_fleet
    f.store.add_ticket("t", id="T-1", body="mode: store69\n")
    _cycle(f, 29)
    assert f.d.tick().launched == []  # one second early
    f.clock.advance(1)
    assert f.d.tick().launched == [("T-1", "resume")]  # the run kept by its 69 goes on
    f.settle()


def test_infra_attempts_show_in_the_evidence_of_an_agent_stop_as_such(runner_fleet):
    f = runner_fleet
    f.store.add_ticket("t", id="T-1", body="mode: store69\n")
    _cycle(f, 30)
    (a,) = f.store.attempts("T-1")
    assert a.failure_signature.startswith("infra: store_unavailable: store: cannot connect")


def test_a_real_loop_whose_store_does_not_answer_ends_as_the_infrastructures(tmp_path):
    """`healer loop run` with its store's server down exits 69 before it can write a result: its one `healer:`
    line is what the dispatcher reads (ending_of), and it names the cause."""
    import os
    import subprocess

    from healer.fleet.dispatch_reap import ending_of
    from healer.fleet.results import read_result
    from tests.conftest import make_repo

    w = make_repo(tmp_path / "w")
    (w / ".healer").mkdir()
    (tmp_path / "task.md").write_text("do it\n")
    (tmp_path / "p.yaml").write_text(
        "loop:\n  agent: {preset: command, command: [python3, -c, 'print(1)']}\n"
        "  gates: [{name: t, run: [python3, -c, 'import sys; sys.exit(0)']}]\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HEALER_")},
           "HEALER_STORE_URL": "postgresql://healer@127.0.0.1:1/nothing"}  # port 1: refused at once
    r = subprocess.run([sys.executable, "-m", "healer", "loop", "run", "--task", str(tmp_path / "task.md"), "--policy",
                        str(tmp_path / "p.yaml"), "--workdir", str(w), "--root", str(w), "--run-id", "T-1-01"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 69 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    e = ending_of(r.returncode, read_result(str(w), "T-1-01"), r.stdout + r.stderr, None)
    assert (e.kind, e.cause) == (en.INFRA, en.STORE_UNAVAILABLE), r.stderr
    assert "connection refused" in e.signature().lower()
