"""Pure dispatch decisions: which tickets to launch, resume or replay now, which to stop.

Theory of operation. The dispatcher shell gathers a `DispatchInput` (tickets, their
attempts and proposals since their budget was last reset, live agents, the pool,
main's status) and calls `decide()`. Everything that decides *whether* and *when* a
ticket may get an agent lives here, as small rules over plain records:

- order: tickets in `blocked_by` order (a networkx DAG), a ticket inheriting the most
  urgent priority of anything waiting on it; a cycle is reported, never followed;
- budgets: `retry.max_launches` launches per ticket (resumes and replays included);
- backoff: after n failed attempts in a row, wait `backoff[min(n-1, len-1)]` after the
  last one ENDED; a clean run (exit 0) resets the count;
- infrastructure endings (healer/core/endings.py) count toward no budget and no escalation; after n of
  them in a row the next launch waits `infra_backoff[min(n-1, len-1)]` instead;
- spinning: a resume that ends on the same (HEAD, tree) it started from counts; a new
  commit resets; `resume_same_state_limit` such resumes in a row stop the ticket;
- replays: a rejected proposal is replayed `rejected_proposal_replays` times, then the
  ticket is blocked;
- the pool: never more live agents than `pool_size`, never two on one ticket;
- a label meaning "wait" (`fleet.wait_labels`, e.g. to-review) holds a queued ticket until it is dropped;
- a red main (unless `fleet.pause_on_red_main` is off) or a paused dispatch launches nothing.

No I/O and no clock: `now` is an input. Same input, same plan.

`replan(inp, rules, carry)` is the same plan for a long-lived caller (the dispatcher ticks every
few seconds over a board that rarely changed): the previous call's plan is handed back while its
input is unchanged but for `now`, and `now` has not reached the first moment time alone could
change it (a backoff ending, a resume window closing). tests/fleet/test_replan.py checks, with
hypothesis, that it always equals `plan`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx

from healer import lifecycle
from healer.core import endings
from healer.core.trusted_time import not_after
from healer.records import Attempt, Proposal, Ticket

LAUNCH = "launch"
RESUME = "resume"
REPLAY = "replay"

# why a ticket is not launched now
RUNNING = "running"
WAIT_DEPS = "waiting_on_dependencies"
CYCLE = "blocked_by_cycle"
BACKOFF = "backoff"
POOL_FULL = "pool_full"
PAUSED = "dispatch_paused"
REVIEW = "in_review"
LABEL = "waiting_on_label"


@dataclass(frozen=True)
class RetryRules:
    """The `retry` policy section as plain numbers (seconds)."""

    max_launches: int = 5
    backoff: tuple[float, ...] = (300.0, 600.0, 1200.0, 2400.0)
    resume_same_state_limit: int = 3
    rejected_proposal_replays: int = 2
    session_ttl: float = 86400.0
    wait_labels: frozenset[str] = frozenset({"to-review"})  # fleet.wait_labels: a queued ticket carrying one waits
    pause_on_red_main: bool = True  # fleet.pause_on_red_main: a red main holds every launch
    infra_backoff: tuple[float, ...] = (30.0, 60.0, 120.0, 300.0)  # retry.infra_backoff: after infrastructure endings

    @classmethod
    def of(cls, policy) -> RetryRules:
        r, f = policy.retry, policy.fleet
        return cls(r.max_launches, tuple(r.backoff), r.resume_same_state_limit, r.rejected_proposal_replays, r.session_ttl,
                   frozenset(f.wait_labels), f.pause_on_red_main, tuple(r.infra_backoff))


@dataclass(frozen=True)
class DispatchInput:
    now: float
    tickets: Sequence[Ticket]
    attempts: Mapping[str, Sequence[Attempt]] = field(default_factory=dict)  # since the ticket's budget reset, oldest first
    proposals: Mapping[str, Sequence[Proposal]] = field(default_factory=dict)  # idem
    live: Mapping[str, int] = field(default_factory=dict)  # ticket -> live dispatched agents
    pool_size: int = 4
    pool_used: int | None = None  # several hosts: this host's live agents (the pool is per host); None: all of `live`
    main_status: str = "green"  # green | red | unknown (unknown is fail-open: dispatch goes on)
    paused: bool = False
    # the wall-clock steps back this process saw, (cutoff, seen) each (healer/core/trusted_time.py): a stamp later
    # than now is from before one, and a wait measured from it starts when the step was seen
    steps_back: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class Launch:
    ticket_id: str
    kind: str  # launch | resume | replay
    run_id: str | None = None  # the run to resume (resume only)
    proposal_id: int | None = None  # the rejected proposal fed back (replay only)


@dataclass(frozen=True)
class Stop:
    ticket_id: str
    to: str  # needs_human | blocked
    reason: str  # launch_budget | spinning | replays_exhausted
    detail: str


@dataclass(frozen=True)
class Waiting:
    ticket_id: str
    reason: str
    eligible_at: float | None = None  # backoff end
    kind: str | None = None  # what it will get once eligible
    detail: str = ""


@dataclass(frozen=True)
class DispatchPlan:
    launches: tuple[Launch, ...] = ()
    stops: tuple[Stop, ...] = ()
    waiting: tuple[Waiting, ...] = ()  # in queue order
    cycles: tuple[tuple[str, ...], ...] = ()  # each a blocked_by cycle, named ticket by ticket
    missing: tuple[tuple[str, str], ...] = ()  # (ticket, unknown blocked_by id)
    live_total: int = 0
    pool_size: int = 0

    def cycle_line(self) -> str:
        return "; ".join("blocked_by cycle: " + " -> ".join((*c, c[0])) for c in self.cycles)


# -- small rules -----------------------------------------------------------------

STOPPED = 4  # the loop's "stopped" exit (SIGTERM, kill switch, pause): interrupted, not failed
# the loop's exit when its disk took no more writes (full, quota, read-only): cut short with its state kept, so
# resumed; an infrastructure ending (healer/core/endings.py): no budget counts it, `retry.infra_backoff` spaces
# the retries, and `fleet.min_free` holds every launch while the disk stays low
HOST_TROUBLE = 74
# the loop's exit when a service it needs was away (its store, its model endpoint, its sandbox): the run is kept
# (its iteration in flight discarded, nothing judged) and resumed, and no budget counts the attempt
UNAVAILABLE = 69


def died(a: Attempt) -> bool:
    """Interrupted rather than finished: killed by a signal, vanished, stopped (exit 4), cut short by its
    host (exit 74) or by a service it needs that was away (exit 69 of the infrastructure's: its store, its model
    endpoint, its sandbox; an agent's setup problem, also 69, starts afresh); such a run is resumed."""
    return a.ended_at is not None and (a.exit_code is None or a.exit_code < 0 or a.exit_code in (STOPPED, HOST_TROUBLE)
                                       or (a.exit_code == UNAVAILABLE and infra(a)))


INTERRUPTED = "interrupted"  # failure-signature prefix: the agent vanished while healer itself was down


def interrupted(a: Attempt) -> bool:
    """Killed with healer (a host crash, a SIGKILLed `up` taking its loop runners along): nobody saw it end.

    Such an attempt is resumed like any dead one, but no budget counts it: it says nothing about the
    ticket's work, and a restart storm must not spend a ticket's launches."""
    return a.ended_at is not None and (a.failure_signature or "").startswith(INTERRUPTED)


def interrupted_signature(code: int | None, *, stopped: bool, launcher_died: bool) -> str | None:
    """The signature of an attempt whose agent vanished without an exit status or a result while the
    dispatcher that launched it was dead (it never released its lease); None when that is not the case.
    An agent the supervisor stopped on purpose (`stopped`) was judged, not interrupted."""
    # a runner killed by a signal while its dispatcher was dead went with it (healer's own restart took it along)
    if (code is None or code < 0) and not stopped and launcher_died:
        return f"{INTERRUPTED}: its dispatcher died before it ended (no exit status, no result)"
    return None


def infra(a: Attempt) -> bool:
    """Ended by the infrastructure (healer/core/endings.py: store, disk, sandbox, git lock, host event)."""
    return a.ended_at is not None and endings.is_infra(a.failure_signature)


def counted(attempts: Sequence[Attempt]) -> list[Attempt]:
    """The attempts budgets and escalations count: the agent's own, not the interrupted or infrastructure ones."""
    return [a for a in attempts if not interrupted(a) and not infra(a)]


def infra_backoff_until(attempts: Sequence[Attempt], backoff: Sequence[float], now: float | None = None,
                        steps_back: Sequence[tuple[float, float]] = ()) -> float | None:
    """After n infrastructure endings in a row (the last attempts), the next launch waits
    `backoff[min(n-1, len-1)]` after the last one ended; None when the last attempt was not one.
    An end stamped after `now` (the clock stepped back since) counts from the step (trusted_time.not_after)."""
    n = 0
    for a in reversed(attempts):
        if not infra(a):
            break
        n += 1
    if n == 0 or not backoff:
        return None
    last = attempts[-1]
    end = not_after(last.ended_at if last.ended_at is not None else last.at, now, steps_back)
    return end + backoff[min(n - 1, len(backoff) - 1)]


def clean(a: Attempt) -> bool:
    return a.exit_code == 0


def failures_since_clean(attempts: Sequence[Attempt]) -> int:
    n = 0
    for a in reversed(attempts):
        if clean(a):
            break
        n += 1
    return n


def backoff_until(attempts: Sequence[Attempt], backoff: Sequence[float], now: float | None = None,
                  steps_back: Sequence[tuple[float, float]] = ()) -> float | None:
    """When the next launch may start; None when it may start now (no attempt, or a clean run last).
    An end stamped after `now` (the clock stepped back since) counts from the step (trusted_time.not_after)."""
    n = failures_since_clean(attempts)
    if n == 0 or not backoff:
        return None
    last = attempts[-1]
    end = not_after(last.ended_at if last.ended_at is not None else last.at, now, steps_back)
    return end + backoff[min(n - 1, len(backoff) - 1)]


def same_state_resumes(attempts: Sequence[Attempt]) -> int:
    """Resumes in a row that ended on the state they started from (the previous attempt's end state).

    A new commit (HEAD moved) resets the count; a non-resume attempt starts a new count.
    """
    count = 0
    prev: Attempt | None = None
    for a in attempts:
        if a.kind != RESUME or prev is None:
            count = 0
        elif a.head != prev.head:
            count = 0
        elif a.state_hash == prev.state_hash:
            count += 1
        prev = a
    return count


def rejected_count(proposals: Sequence[Proposal]) -> int:
    return sum(1 for p in proposals if p.state == "rejected")


def resumable(attempts: Sequence[Attempt], now: float, ttl: float) -> str | None:
    """The run a dead agent can be resumed in (within the session window), else None."""
    return _resumable(attempts, now, ttl)[0]


def _resumable(attempts: Sequence[Attempt], now: float, ttl: float) -> tuple[str | None, float]:
    """`resumable`, and the first moment at or after `now` its answer can differ (inf: never, time only goes on)."""
    if not attempts or not died(attempts[-1]) or not attempts[-1].run_id:
        return None, math.inf
    run = attempts[-1].run_id
    started = min(a.at for a in attempts if a.run_id == run)
    if not now - started <= ttl:
        return None, math.inf  # the window closed: it stays closed
    # the last moment still inside the window, as the float subtraction above sees it (it rounds)
    last = started + ttl
    while not last - started <= ttl:
        last = math.nextafter(last, -math.inf)
    return run, math.nextafter(last, math.inf)


# -- ordering --------------------------------------------------------------------

def graph(tickets: Sequence[Ticket], only: set[str] | None = None) -> nx.DiGraph:
    """Edges dependency -> dependent, between the tickets given (or only those in `only`); a concrete graph, not a view."""
    ids = {t.id for t in tickets} if only is None else only
    g = nx.DiGraph()
    g.add_nodes_from(ids)
    g.add_edges_from((d, t.id) for t in tickets if t.id in ids for d in t.blocked_by if d in ids)
    return g


def _edgeless(tickets: Sequence[Ticket], ids: set[str]) -> bool:
    # the common fleet has no blocked_by at all: skip building a graph every dispatch tick
    return not any(d in ids for t in tickets if t.blocked_by and t.id in ids for d in t.blocked_by)


def _cyclic(g: nx.DiGraph) -> list[set[str]]:
    loops = set(nx.nodes_with_selfloops(g))
    return [c for c in nx.strongly_connected_components(g) if len(c) > 1 or c & loops]


def cycles(tickets: Sequence[Ticket]) -> list[tuple[str, ...]]:
    """Every blocked_by cycle among unfinished tickets, each named in cycle order (polynomial: one per SCC)."""
    ids = {t.id for t in tickets if t.state not in lifecycle.TERMINAL}
    if _edgeless(tickets, ids):
        return []
    g = graph(tickets, ids)
    out = []
    for comp in _cyclic(g):
        edges = nx.find_cycle(g.subgraph(comp).reverse(), source=min(comp))  # follow blocked_by: "A -> B" = A waits on B
        out.append(tuple(u for u, _ in edges))
    return sorted(out)


def order(tickets: Sequence[Ticket]) -> list[str]:
    """Ticket ids in dispatch order: dependencies first, then by effective priority, age, id.

    A ticket's effective priority is the most urgent of its own and of every ticket
    waiting on it (so a low-priority blocker of an urgent ticket goes first). Tickets
    on a cycle are ordered last, by their own key.
    """
    by_id = {t.id: t for t in tickets}
    if _edgeless(tickets, set(by_id)):  # no dependencies: plain key order, what the topological sort would give
        return sorted(by_id, key=lambda n: (by_id[n].priority, by_id[n].priority, by_id[n].created_at, n))
    dag = graph(tickets)
    in_cycle = set().union(*_cyclic(dag)) if dag else set()
    dag.remove_nodes_from(in_cycle)
    eff: dict[str, int] = {}
    for n in reversed(list(nx.topological_sort(dag))):
        eff[n] = min([by_id[n].priority, *(eff[s] for s in dag.successors(n))])

    def key(n: str) -> tuple:
        t = by_id[n]
        return (eff.get(n, t.priority), t.priority, t.created_at, t.id)

    return [*nx.lexicographical_topological_sort(dag, key=key), *sorted(in_cycle, key=key)]


# -- the plan --------------------------------------------------------------------

def decide(inp: DispatchInput, rules: RetryRules) -> DispatchPlan:
    return _plan(inp, rules)[0]


@dataclass(frozen=True)
class Carry:
    """What `replan` keeps: the rules and input it planned, the plan, and the moment time alone could change it."""

    rules: RetryRules
    inp: DispatchInput
    plan: DispatchPlan
    until: float  # the plan holds for every `now` in [inp.now, until) while the rest of the input is the same


def replan(inp: DispatchInput, rules: RetryRules, carry: Carry | None = None) -> tuple[DispatchPlan, Carry]:
    """`decide(inp, rules)`, and the carry to hand to the next call (None: plan from scratch)."""
    if (carry is not None and carry.inp.now <= inp.now < carry.until and (carry.rules is rules or carry.rules == rules)
            and _same_but_now(carry.inp, inp)):
        return carry.plan, carry
    p, until = _plan(inp, rules)
    return p, Carry(rules, inp, p, until)


def _same_but_now(a: DispatchInput, b: DispatchInput) -> bool:
    # containers compare their items by identity first: a store that hands back the very same records is cheap
    # to compare; equal copies cost a comparison; anything else (a list for a tuple too) plans again
    return (a.pool_size == b.pool_size and a.pool_used == b.pool_used and a.main_status == b.main_status
            and a.paused == b.paused and a.steps_back == b.steps_back and list(a.tickets) == list(b.tickets) and dict(a.live) == dict(b.live)
            and dict(a.attempts) == dict(b.attempts) and dict(a.proposals) == dict(b.proposals))


def _plan(inp: DispatchInput, rules: RetryRules) -> tuple[DispatchPlan, float]:
    """The plan, and the first moment after `inp.now` time alone could change it (inf: never)."""
    until_change = math.inf
    by_id = {t.id: t for t in inp.tickets}
    cyc = cycles(inp.tickets)
    on_cycle = {n for c in cyc for n in c}
    missing = tuple(sorted((t.id, d) for t in inp.tickets if t.state not in lifecycle.TERMINAL
                           for d in t.blocked_by if d not in by_id))
    live_total = sum(inp.live.values()) if inp.pool_used is None else inp.pool_used
    slots = max(0, inp.pool_size - live_total)
    hold = inp.paused or (inp.main_status == "red" and rules.pause_on_red_main)

    launches: list[Launch] = []
    stops: list[Stop] = []
    waiting: list[Waiting] = []

    for tid in order(inp.tickets):
        t = by_id[tid]
        if t.state not in (lifecycle.QUEUED, lifecycle.REVIEW):
            continue
        if inp.live.get(tid, 0) > 0:
            waiting.append(Waiting(tid, RUNNING))
            continue
        every = list(inp.attempts.get(tid, ()))
        atts = counted(every)
        props = list(inp.proposals.get(tid, ()))

        if t.state == lifecycle.REVIEW:
            if not props or props[-1].state != "rejected":
                waiting.append(Waiting(tid, REVIEW))  # the shell gates the open proposal
                continue
            if rejected_count(props) > rules.rejected_proposal_replays:
                stops.append(Stop(tid, lifecycle.BLOCKED, "replays_exhausted",
                                  f"proposal rejected {rejected_count(props)} times "
                                  f"({rules.rejected_proposal_replays} replays allowed)"))
                continue
            want = Launch(tid, REPLAY, proposal_id=props[-1].id)
        else:
            if tid in on_cycle:
                waiting.append(Waiting(tid, CYCLE, detail=" -> ".join(next(c for c in cyc if tid in c))))
                continue
            deps = [d for d in t.blocked_by if d not in by_id or by_id[d].state not in lifecycle.TERMINAL]
            if deps:
                waiting.append(Waiting(tid, WAIT_DEPS, detail=", ".join(deps)))
                continue
            held = sorted(set(t.labels) & rules.wait_labels)
            if held:  # "to-review" means wait for a review: the ticket goes once the label is gone
                waiting.append(Waiting(tid, LABEL, detail=", ".join(held)))
                continue
            spins = same_state_resumes(atts)
            if spins >= rules.resume_same_state_limit:
                stops.append(Stop(tid, lifecycle.NEEDS_HUMAN, "spinning",
                                  f"{spins} resumes on the same state without a new commit"))
                continue
            run, flips = _resumable(every, inp.now, rules.session_ttl)
            until_change = min(until_change, flips)
            want = Launch(tid, RESUME, run_id=run) if run else Launch(tid, LAUNCH)

        if len(atts) >= rules.max_launches:
            stops.append(Stop(tid, lifecycle.NEEDS_HUMAN, "launch_budget",
                              f"{len(atts)} launches used of {rules.max_launches} (resumes included)"))
            continue
        until = backoff_until(atts, rules.backoff, inp.now, inp.steps_back)
        later = infra_backoff_until(every, rules.infra_backoff, inp.now, inp.steps_back)
        if later is not None and (until is None or later > until):
            until = later
        if until is not None and until > inp.now:
            until_change = min(until_change, until)
            waiting.append(Waiting(tid, BACKOFF, eligible_at=until, kind=want.kind))
            continue
        if hold:
            waiting.append(Waiting(tid, PAUSED, kind=want.kind, detail=f"main {inp.main_status}" if inp.main_status == "red" else "paused"))
            continue
        if slots <= 0:
            waiting.append(Waiting(tid, POOL_FULL, kind=want.kind))
            continue
        launches.append(want)
        slots -= 1

    return (DispatchPlan(tuple(launches), tuple(stops), tuple(waiting), tuple(cyc), missing, live_total, inp.pool_size),
            until_change)
