"""One dispatcher pass, decided in one place: `decide`, pure.

Theory of operation. The supervisor's pass is one call, `healer.core.decide(snapshot, policy, memory)`, because its
actions do not feed each other. A dispatcher pass cannot be decided from one snapshot taken at its start: what it
reads later is the outcome of its own earlier effects (a reaped ticket is back in the queue or in review before the
merges; main's gates and a proposal's gates are effects whose verdict only the world gives, and a proposal rejected
or merged in this pass is replayed, or unblocks its dependents, in this very pass). So `decide` is the pass as
a *program over plain data*: a generator that yields every step of the pass in the order it is carried out, and
receives what the world answered:

- a `Read*` step asks the shell for a view of the store and the world as it is now (the shell gathers, decides
  nothing: healer/fleet/dispatcher.py and its collaborators);
- every other step is an effect (a move, an attempt closed, a proposal gated and recorded, a launch, a stop, a
  pause, an event, a page) as a frozen dataclass; the collaborator that carries it out answers what happened
  (the proposal's state after its verdict, whether a launch started) or None.

Every decision between the reads and the effects is made here, with the pure rules of healer/core/dispatch.py
(the launch plan), dispatch_steps.py (main, proposals, reaping, orphans), fleet.py (main's colour, the pause, an
exit's move, the silent supervisor), disk.py (disk pressure) and hosts.py (an earlier host id's rows). Same views
and answers, same steps: `plan_pass` runs the program against scripted answers (the tests' and Hypothesis's way in).

What stays in the shell, on purpose (crash safety): the leases (taken before the pass, its fence on every write),
the one-transaction groupings of an effect, and each compare-and-set that must be re-read fresh right before it
acts (a ticket moved by someone else meanwhile, a proposal decided elsewhere while its gates ran, an attempt a
later one replaced, a stop asked while launching). Those re-reads sit in the applier, each with a comment saying so.

No I/O, no clock: every time is an input (a view's `now`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from healer import conventions as cv
from healer import durations, lifecycle
from healer.core import disk, hosts, trusted_time
from healer.core import dispatch as core
from healer.core import dispatch_steps as steps
from healer.core import fleet as fleet_rules  # looked up at each call (a mutation test swaps its rules)
from healer.core.fleet import RED, UNKNOWN, Effect
from healer.records import Agent, Attempt, Proposal, Ticket

# -- what the shell hands in --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Switches:
    """The game-day switches the decisions obey (healer/switches.py), read by the shell: the core reads no environment."""

    fail_open: bool = True
    infra_endings: bool = True
    host_takeback: bool = True


@dataclass(frozen=True)
class PassSnapshot:
    """What the shell knows before the pass's first decision (its leases already taken)."""

    now: float
    host: str  # the host this dispatcher dispatches as
    machine: str | None  # this boot and fleet root (healer/fleet/lost_hosts.py machine_id)
    board: bool  # this dispatcher holds the board's lease (main, merges, stops are its duties)
    shared: bool  # several hosts on one board (fleet.shared_remote)
    readings: tuple[disk.Reading, ...] = ()  # free space, measured before any store write
    min_free: int = 0
    steps_back: tuple[tuple[float, float], ...] = ()  # the wall clock's steps back this process saw
    time: tuple[Any, Any] = (None, None)  # this pass's (Timebase, TimeState) (healer/core/trusted_time.py)
    watching_since: float | None = None  # this process's first pass (a restart's downtime is not the supervisor's)
    switches: Switches = Switches()


@dataclass(frozen=True)
class PassMemory:
    """What a dispatcher carries from one pass to the next."""

    carry: core.Carry | None = None  # the last launch plan (`core.replan`)
    disk_low: bool | None = None  # None: not known yet (the store's setting says, on the first pass)


# -- views the shell gathers when asked ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """An agent of this host as the runtime sees it now."""

    agent: Agent
    state: str  # running | paused | exited | gone | unknown
    exit_code: int | None = None
    head: str | None = None  # its worktree's HEAD (heartbeats only)


@dataclass(frozen=True)
class EndSeen:
    """What an ended agent left: its result file, its worktree's HEAD and state hash, its log's tail."""

    result: Mapping[str, Any] | None
    head: str | None
    state_hash: str | None
    log_tail: str
    new_work: bool = True  # HEAD is not in main's history yet: an exit 0 on a HEAD main holds delivered nothing


@dataclass(frozen=True)
class HostLease:
    holder: str
    expires_at: float
    pid_alive: bool  # its holder's pid runs (the process table's answer)


@dataclass(frozen=True)
class TakeBackView:
    agents: tuple[Agent, ...]  # this fleet's agents, running or owed their attempt
    tickets: tuple[Ticket, ...]  # the tickets in progress
    leases: Mapping[str, HostLease | None]  # each other host id those name: its host lease (None: never taken)
    now: float


@dataclass(frozen=True)
class OrphanView:
    ticket: Ticket  # in progress
    live: bool  # an agent runs on it (any host)
    open_attempts: tuple[Attempt, ...]
    last_mover: str | None  # who last moved it (read only when it has no open attempt)


@dataclass(frozen=True)
class MainSeen:
    view: steps.MainView
    now: float
    paused: bool
    paused_reason: str | None
    red_since: float | None


@dataclass(frozen=True)
class GateOutcome:
    outcome: str  # pass | fail | unknown (main); merged | rejected | withheld | deferred (a proposal)
    log: str
    now: float  # when the gates ended
    conflict: Mapping[str, Any] | None = None
    guarded: str | None = None
    main_after: str | None = None


@dataclass(frozen=True)
class ReviewSeen:
    last: Proposal | None
    head: str | None  # its worktree's or branch's commit (read only when it has no proposal)


@dataclass(frozen=True)
class BoardView:
    inp: core.DispatchInput
    cycles_noted: tuple[tuple[str, ...], ...] = ()  # the cycles last recorded (dispatch.cycles)


# -- reads: the shell answers with the view named -------------------------------------------------------------------


@dataclass(frozen=True)
class ReadSetting:
    key: str


@dataclass(frozen=True)
class ReadTakeBack:
    pass  # -> TakeBackView


@dataclass(frozen=True)
class ReadRunning:
    heads: bool = False  # -> tuple[Seen, ...]: this host's running agents; with heads, each worktree's HEAD


@dataclass(frozen=True)
class ReadEnds:
    agents: tuple[Agent, ...]  # -> tuple[EndSeen, ...], in order


@dataclass(frozen=True)
class ReadToReap:
    pass  # -> tuple[Agent, ...]: this host's agents recorded ended by someone else, not reaped yet


@dataclass(frozen=True)
class ReadOrphans:
    pass  # -> tuple[OrphanView, ...]: the tickets in progress, in board order


@dataclass(frozen=True)
class FindAgent:
    ticket: str
    attempt: Attempt  # -> the process (healer/fleet/ports.py Processes.find_agent) or None


@dataclass(frozen=True)
class ReadMain:
    pass  # -> MainSeen


@dataclass(frozen=True)
class ReadReviewing:
    pass  # -> tuple[Ticket, ...]


@dataclass(frozen=True)
class ReadReview:
    ticket: str  # -> ReviewSeen


@dataclass(frozen=True)
class ReadBoard:
    pass  # -> BoardView


# -- effects: a collaborator carries each out (answer in brackets) ----------------------------------------------------


@dataclass(frozen=True)
class Exclusive:
    """Take (or let go of) the reaper's lock: the pass's reaping and the exit watch's never run side by side."""

    name: str
    hold: bool


@dataclass(frozen=True)
class Remember:
    """What the next pass starts from, kept as soon as it is known: a pass that fails later still remembers it (a
    disk change recorded is not recorded again)."""

    memory: PassMemory


@dataclass(frozen=True)
class Apply:
    """The core's `Effect`s (settings, events, pages), in order."""

    effects: tuple[Effect, ...]


@dataclass(frozen=True)
class Reclaim:
    pass  # the disk is low: healer's own files of finished tickets go (journal first)


@dataclass(frozen=True)
class TakeBack:
    agents: tuple[Agent, ...]  # recorded under an earlier host id of this machine: this host's now
    tickets: tuple[str, ...]


@dataclass(frozen=True)
class CloseAttempt:
    """An ended agent's attempt closed, the agent recorded, its ticket moved (one transaction) [None]."""

    agent: Agent
    end: steps.AttemptEnd
    head: str | None
    state_hash: str | None
    agent_state: str | None  # exited | lost; None: someone else recorded the agent's end already
    proposed: str | None = None  # the commit a clean exit proposes: its HEAD when main does not hold it yet, else none


@dataclass(frozen=True)
class StopReclaimed:
    agent: Agent  # this host was given up and the ticket requeued: its agent, if it still runs, is stopped


@dataclass(frozen=True)
class Adopt:
    ticket: str
    attempt: Attempt
    process: Any  # found by its agent id (a dispatcher killed between starting and registering it)


@dataclass(frozen=True)
class RequeueOrphan:
    ticket: str
    attempts: tuple[int, ...]  # closed as interrupted (its dispatcher died mid-launch: no budget counts them)


@dataclass(frozen=True)
class Heartbeat:
    beats: tuple[tuple[Agent, str | None, bool], ...]  # (agent, HEAD, progress), one transaction


@dataclass(frozen=True)
class RunMainGates:
    head: str  # [GateOutcome]


@dataclass(frozen=True)
class MoveStaleLocks:
    pass  # git's lock files in the fleet root nobody holds open: moved aside (a dispatcher killed mid-merge)


@dataclass(frozen=True)
class Move:
    ticket: str
    to: str
    reason: str
    expect: str | None  # compare-and-set [bool]


@dataclass(frozen=True)
class Propose:
    ticket: str
    head: str  # [Proposal]


@dataclass(frozen=True)
class GateProposal:
    ticket: Ticket
    proposal: Proposal  # [GateOutcome]: gated on its merge result (main advances on a pass)


@dataclass(frozen=True)
class Withheld:
    proposal: Proposal  # decided elsewhere while its gates ran: recorded rejected
    log: str
    events: tuple[Effect, ...]


@dataclass(frozen=True)
class Verdict:
    """A proposal's verdict recorded, its events, and (merged) its ticket done: one transaction [its state after]."""

    ticket: Ticket
    proposal: Proposal
    outcome: str
    log: str
    events: tuple[Effect, ...]
    merged_as: str | None


@dataclass(frozen=True)
class Finish:
    ticket: Ticket
    proposal: Proposal  # merged, the ticket not done yet (a recording cut short): done now
    merged_as: str | None


@dataclass(frozen=True)
class StopTicket:
    stop: core.Stop  # to needs-human or blocked, with its evidence


@dataclass(frozen=True)
class LaunchAgent:
    launch: core.Launch  # [LAUNCHED | NOT_LAUNCHED | STOPPING]


@dataclass(frozen=True)
class TickRecord:
    payload: Mapping[str, Any]  # dispatch.last_tick_at and the dispatch.tick event, one transaction


READS = (ReadSetting, ReadTakeBack, ReadRunning, ReadEnds, ReadToReap, ReadOrphans, FindAgent, ReadMain, ReadReviewing,
         ReadReview, ReadBoard)
EFFECTS = (Remember, Apply, Reclaim, TakeBack, CloseAttempt, StopReclaimed, Adopt, RequeueOrphan, Heartbeat, RunMainGates,
           MoveStaleLocks, Move, Propose, GateProposal, Withheld, Verdict, Finish, StopTicket, LaunchAgent, TickRecord)
LAUNCHED, NOT_LAUNCHED, STOPPING = "launched", "not_launched", "stopping"
REAP_LOCK = "reap"

Step = Any  # one of the dataclasses above
Program = Generator[Step, Any, Any]


@dataclass(frozen=True)
class PassResult:
    reaped: tuple[str, ...] = ()
    main: str = UNKNOWN
    merged: tuple[str, ...] = ()
    rejected: tuple[str, ...] = ()
    stopped: tuple[tuple[str, str], ...] = ()
    launched: tuple[tuple[str, str], ...] = ()
    plan: core.DispatchPlan | None = None
    memory: PassMemory = field(default_factory=PassMemory)


# -- the pass ----------------------------------------------------------------------------------------------------------


def decide(snap: PassSnapshot, policy: Any, rules: core.RetryRules, memory: PassMemory) -> Generator[Step, Any, PassResult]:
    """The whole pass: disk, reaping, heartbeats, main, merges, stops and launches, the silent supervisor, the record."""
    low, disk_low = yield from disk_pressure(snap, memory.disk_low)
    if disk_low != memory.disk_low:
        yield Remember(replace(memory, disk_low=disk_low))
    yield Exclusive(REAP_LOCK, True)
    yield from take_back(snap)
    reaped = yield from reap(snap, orphans=True)
    yield Exclusive(REAP_LOCK, False)
    yield from heartbeat()
    merged: tuple[str, ...] = ()
    rejected: tuple[str, ...] = ()
    if snap.board and not low:  # a low disk holds main's gates and the merges too: a gate failing for want of space
        main = yield from check_main(snap, policy)  # would turn main red or reject a good proposal (not the work's)
        if main != RED:
            merged, rejected = yield from review()
    else:
        main = (yield ReadSetting(cv.MAIN_STATUS)) or UNKNOWN
    view: BoardView = yield ReadBoard()
    inp = view.inp
    if snap.board and not low:  # main as this pass judged it (the store says the same once its effects applied)
        inp = replace(inp, main_status=main)
    if snap.steps_back:  # a backoff from before a step back starts at the step
        inp = replace(inp, steps_back=snap.steps_back)
    if low and not inp.paused:  # held here too: the pause may not have reached the store (or is not ours to set)
        inp = replace(inp, paused=True)
    plan, carry = core.replan(inp, rules, memory.carry)
    yield Remember(PassMemory(carry, disk_low))
    stopped: list[tuple[str, str]] = []
    if snap.board:
        cycles = [list(c) for c in plan.cycles]
        if cycles != [list(c) for c in view.cycles_noted]:
            yield Apply((Effect("set", cv.DISPATCH_CYCLES, cycles),
                         *([Effect("event", "dispatch.cycle", "", {"cycles": cycles, "line": plan.cycle_line()})]
                           if cycles else [])))
        for s in plan.stops:
            yield StopTicket(s)
            stopped.append((s.ticket_id, s.to))
    launched: list[tuple[str, str]] = []
    for launch in plan.launches:
        got = yield LaunchAgent(launch)
        if got == STOPPING:
            break
        if got == LAUNCHED:
            launched.append((launch.ticket_id, launch.kind))
    if snap.board:
        yield from watch_supervisor(snap, policy)
    yield TickRecord({"launched": len(launched), "reaped": len(reaped), "main": main,
                      "live": plan.live_total + len(launched), "pool": plan.pool_size, "waiting": len(plan.waiting),
                      "merged": len(merged), "rejected": len(rejected)})
    return PassResult(tuple(reaped), main, merged, rejected, tuple(stopped), tuple(launched), plan,
                      PassMemory(carry, disk_low))


def disk_pressure(snap: PassSnapshot, was: bool | None) -> Generator[Step, Any, tuple[bool, bool | None]]:
    """Disk pressure (healer/core/disk.py): a change between low and not low recorded (event, pause, page), and
    while low healer's own files of finished tickets reclaimed. (low, what the next pass remembers)."""
    if not snap.readings or snap.min_free <= 0:
        return False, was
    low = bool(disk.low(snap.readings, snap.min_free))
    if was is None:
        was = (yield ReadSetting(disk.SETTING)) is not None
    if low != was:
        paused = bool((yield ReadSetting(cv.DISPATCH_PAUSED))) or snap.shared
        reason = yield ReadSetting(cv.DISPATCH_PAUSED_REASON)
        yield Apply(tuple(disk.disk_changed(snap.readings, snap.min_free, was_low=was, now=snap.now, paused=paused,
                                            paused_reason=reason)))
    if low:
        yield Reclaim()
    return low, low


def take_back(snap: PassSnapshot) -> Program:
    """This host restarted under a new id: what its earlier id recorded on this machine is its own again
    (healer/core/hosts.py `taken_back`), so the reaping below adopts or closes it, once."""
    if not snap.machine or not snap.switches.host_takeback:
        return ()
    v: TakeBackView = yield ReadTakeBack()
    # another dispatcher that holds its host's lease now (several hosts on one root and machine) keeps its rows; a
    # lease never taken (one host), expired, fenced or held by a dead pid is no one's
    live = [h for h, lease in v.leases.items() if lease is not None and lease.pid_alive
            and steps.lease_held(lease.holder, lease.expires_at, v.now, hosts.FENCED)]
    tb = hosts.taken_back(v.agents, v.tickets, snap.host, snap.machine, live)
    if tb.agents or tb.tickets:
        by_id = {a.id: a for a in v.agents}
        yield TakeBack(tuple(by_id[a] for a in tb.agents), tb.tickets)
    return tb.agents


def reap(snap: PassSnapshot, *, orphans: bool = True) -> Generator[Step, Any, list[str]]:
    """Close the attempts of this host's agents that ended; then those someone else recorded ended; then (not from the
    exit watch: a launch in flight would look like one) the in-progress tickets without a live agent."""
    done: list[str] = []
    ended = []
    for s in (yield ReadRunning()):
        over, code = steps.ended_code(s.state, s.exit_code)
        if over:
            ended.append((s.agent, code))
            done.append(s.agent.id)
    crashed: frozenset[str] = frozenset()
    if ended:
        crashed = frozenset((yield ReadSetting(cv.DISPATCH_CRASHED)) or ())
        seen = yield ReadEnds(tuple(a for a, _ in ended))
        for (a, code), e in zip(ended, seen, strict=True):
            yield close(snap, a, code, e, crashed, record_agent=True)
    for a in (yield ReadToReap()):
        step = steps.to_reap(a.data.get("launched_by") == cv.DISPATCH_ACTOR and a.host == snap.host,
                             a.data.get("reaped_by"), bool(a.data.get("stopped_here")), bool(a.data.get("reaped")))
        if step == steps.STOP_RECLAIMED:
            yield StopReclaimed(a)
        elif step == steps.CLOSE:
            if not crashed:
                crashed = frozenset((yield ReadSetting(cv.DISPATCH_CRASHED)) or ())
            e, = yield ReadEnds((a,))
            yield close(snap, a, a.exit_code, e, crashed, record_agent=False)
            done.append(a.id)
    if orphans:
        yield from reconcile_orphans(snap)
    return done


def close(snap: PassSnapshot, a: Agent, code: int | None, e: EndSeen, crashed: frozenset[str], *,
          record_agent: bool) -> CloseAttempt:
    """How an ended agent's attempt is closed (healer/core/dispatch_steps.py `attempt_end`)."""
    end = steps.attempt_end(code, e.result, e.log_tail, stopped=a.state == "stopped",
                            launcher_died=a.data.get("dispatcher") in crashed,
                            infra_endings=snap.switches.infra_endings)
    return CloseAttempt(a, end, e.head, e.state_hash, fleet_rules.agent_end_state(end.exit_code) if record_agent else None,
                        e.head if e.new_work else None)


def reconcile_orphans(snap: PassSnapshot) -> Program:
    """An in-progress ticket this dispatcher took but that has no live agent (a crash mid-launch): its agent adopted
    when it runs unseen, else the ticket back to the queue."""
    for o in (yield ReadOrphans()):
        if not steps.orphan_candidate(o.live, (o.ticket.data or {}).get("host", snap.host), snap.host, snap.shared):
            continue  # a live agent, or another host's claim (its launch may be in flight)
        if not fleet_rules.owns_orphan(False, len(o.open_attempts), o.last_mover):
            continue  # a human or another tool put it in progress: the supervisor's rules judge it
        adopted = False
        for att in o.open_attempts:
            p = yield FindAgent(o.ticket.id, att)
            if p is not None:
                yield Adopt(o.ticket.id, att, p)
                adopted = True
                break
        if not adopted:
            yield RequeueOrphan(o.ticket.id, tuple(x.id for x in o.open_attempts))


def heartbeat() -> Program:
    """This host's live agents beat (progress when their HEAD moved); a SIGSTOPped one does not: the supervisor must
    see it idle."""
    beats = tuple((s.agent, s.head, s.head is not None and s.head != s.agent.data.get("head"))
                  for s in (yield ReadRunning(heads=True)) if s.state == "running")
    if beats:
        yield Heartbeat(beats)


def check_main(snap: PassSnapshot, policy: Any) -> Generator[Step, Any, str]:
    """main's status: whether its gates run (healer/core/dispatch_steps.py `main_step`), their verdict, and what it
    does (main's colour, the pause on red, the page)."""
    fleet = policy.fleet
    m: MainSeen = yield ReadMain()
    step = steps.main_step(m.view, fleet.main_branch)
    if step.status is not None:
        return step.status
    verdict, log, now = step.verdict or steps.PASS, step.log, m.now
    if step.run_gates and m.view.head is not None:
        res: GateOutcome = yield RunMainGates(m.view.head)
        verdict = steps.gate_verdict(res.outcome, fail_open=snap.switches.fail_open)  # a game day's --disable
        log, now = res.log, res.now
    status, effects = steps.main_decided(m.view, verdict, log, now=now, branch=fleet.main_branch, paused=m.paused,
                                         paused_reason=m.paused_reason, red_since=m.red_since,
                                         pause_on_red=fleet.pause_on_red_main)
    yield Apply(tuple(effects))
    return status


def review() -> Generator[Step, Any, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Each ticket in review: its proposal opened from its branch, gated and merged or rejected, or finished."""
    merged: list[str] = []
    rejected: list[str] = []
    reviewing = yield ReadReviewing()
    if reviewing:
        yield MoveStaleLocks()
    for t in reviewing:
        r: ReviewSeen = yield ReadReview(t.id)
        last = r.last
        step = steps.review_step(last.state if last else None, r.head)
        if step == steps.REQUEUE:
            yield Move(t.id, lifecycle.QUEUED, "in review without a proposal or a branch", lifecycle.REVIEW)
            continue
        if step == steps.PROPOSE and r.head:  # from the branch's head, then gated like any open proposal
            last = yield Propose(t.id, r.head)
            step = steps.review_step(last.state)
        if last is None:
            continue
        if step == steps.FINISH:
            yield Finish(t, last, last.commit)
            continue
        if step != steps.GATE:
            continue
        v: GateOutcome = yield GateProposal(t, last)
        events = tuple(steps.verdict_events(t.id, last.id, last.commit, v.outcome, v.log, conflict=v.conflict,
                                            guarded=v.guarded))
        after = steps.verdict_step(v.outcome)
        if after == steps.WITHHELD:  # decided elsewhere while the gates ran: that first verdict stands
            yield Withheld(last, v.log, events)
            continue
        if after == steps.DEFERRED:
            yield Apply(events)
            continue
        held = yield Verdict(t, last, v.outcome, v.log, events, v.main_after)
        (merged if held == "merged" else rejected).append(t.id)
    return tuple(merged), tuple(rejected)


def watch_supervisor(snap: PassSnapshot, policy: Any) -> Program:
    """Who watches the watcher: a supervisor that ticked once and then fell silent is a finding the supervisor
    itself cannot report (one page per cooldown), judged on the clock it stamps its ticks with."""
    tb, ts = snap.time
    now = tb.now if tb is not None else snap.now
    last = yield ReadSetting(cv.SUPERVISOR_LAST_TICK)
    threshold = policy.sentinels.supervisor_silent
    # a watcher judges only the silence it watched: a restart's downtime is not the supervisor's
    watched = None if last is None else max(float(last), snap.watching_since or float(last))
    silent = fleet_rules.supervisor_silent(watched, now, threshold)
    if silent is None or watched is None:
        return
    if trusted_time.finding_hold("supervisor_silent", watched, {}, policy, tb, ts):
        return  # a silence measured across a wall-clock jump: paged only once confirmed on the monotonic clock
    yield Apply((Effect("notify", "supervisor_silent",
                        f"supervisor silent for {durations.format(round(silent))} (threshold "
                        f"{durations.format(round(threshold))}): remediation is not running",
                        {"last_tick_at": last, "silent_s": round(silent, 1)}, severity="critical"),))


# -- running a program --------------------------------------------------------------------------------------------------


def drive(program: Generator[Step, Any, Any], answer: Callable[[Step], Any]) -> Any:
    """Run `program`, each step answered by `answer` (the shell's collaborators, or a test's script); its result."""
    reply = None
    while True:
        try:
            step = program.send(reply)
        except StopIteration as done:
            return done.value
        reply = answer(step)


def plan_pass(snap: PassSnapshot, policy: Any, rules: core.RetryRules, memory: PassMemory,
              answer: Callable[[Step], Any]) -> tuple[list[Step], PassResult]:
    """Every step of one pass against scripted answers, and its result: pure when `answer` is."""
    seen: list[Step] = []

    def record(step: Step) -> Any:
        seen.append(step)
        return answer(step)

    return seen, drive(decide(snap, policy, rules, memory), record)

