"""The dispatcher shell: one `tick()` reconciles the board with the world, then acts on the plan.

Each tick (level-triggered, like a Kubernetes controller; it never trusts that it saw
every event, so a crash between ticks is harmless):

1. reap: every agent this host launched whose process ended gets its attempt closed
   (exit code, failure signature, HEAD, state hash, gate-log tail); exit 0 opens a
   proposal, anything else requeues the ticket;
2. heartbeat the live agents (progress when their HEAD moved);
3. main's status: the main gates run on main (again whenever main moves, every tick
   while red); red pauses dispatch, green resumes it;
4. proposals: each open one is gated on its merge result and merged or rejected
   (held while main is red);
5. plan (`healer.core.dispatch.decide`, pure) and carry it out: stops (needs-human with
   evidence, blocked), then launches, resumes and replays within the pool.

Every decision of those steps is made by one pure function, `healer.core.dispatch_pass.decide`: a program that
yields each step of the pass as plain data (a read this shell answers with a view, or an effect a collaborator
carries out and answers with its outcome), because a pass reads what its own merges and reaps left. `tick` takes
the leases, measures the disk, builds the snapshot and drives that program, routing each step by its type
(`answerer`) to a collaborator: the `Reaper` (step 1 and the heartbeats, healer/fleet/dispatch_reap.py), the
`Merger` (3 and 4, dispatch_merge.py), the `Stopper` and the `AgentLauncher` (5, dispatch_stop.py and
dispatch_launch.py), over what they share (dispatch_board.py: the `TicketMover`, the `EffectApplier`, `MainRef`,
`Identity`); each built here with exactly what it needs (no attribute reached on a host object). Decisions use
`clock` (virtual in tests); waiting for real processes uses real time. A pass that fails: healer/fleet/failed_pass.py.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from healer import conventions as cv
from healer import failpoints, lifecycle
from healer.clock import Clock, Every, SystemClock, system
from healer.core import dispatch as core
from healer.core import dispatch_pass as core_pass
from healer.core import dispatch_steps as steps
from healer.core import hosts, trusted_time
from healer.errors import InvalidInput, StoreLost, StoreUnavailable, UsageError, transient
from healer.fleet import budget, shared_main, timewatch
from healer.fleet.disk import DiskWatch
from healer.fleet.dispatch_board import EffectApplier, Identity, MainRef, TicketMover, answerer, handle_of, ours, switches_now
from healer.fleet.dispatch_launch import AgentLauncher
from healer.fleet.dispatch_merge import Merger
from healer.fleet.dispatch_reap import Reaper
from healer.fleet.dispatch_stop import Stopper
from healer.fleet.failed_pass import host_trouble_or_corrupt, raise_if_lost, report_failed_pass
from healer.fleet.lost_hosts import host_id, machine_id
from healer.fleet.ports import REAL, Ports
from healer.fleet.runtime import EXITED, GONE, Runtime
from healer.fleet.runtimes import runtime_for
from healer.notify import secrets
from healer.store import keys, open_url, outage
from healer.store.base import Store
from healer.store.corrupt import raise_if_corrupt
from healer.store.sqlite import pid_alive

if TYPE_CHECKING:
    from healer.policy.schema import Policy

ACTOR = cv.DISPATCH_ACTOR
LEASE = cv.DISPATCH_LEASE


# -- gathering what the pure core needs --------------------------------------------

def live_counts(store: Store) -> Counter[str]:
    return Counter(a.ticket_id for a in store.agents(states=["running"]) if ours(a) and a.ticket_id)


_DISPATCHABLE = frozenset({lifecycle.QUEUED, lifecycle.REVIEW})  # the states a plan can launch from


def gather(store: Store, policy: Policy, now: float, host: str | None = None, resets: budget.Resets | None = None) -> core.DispatchInput:
    """`host` (several hosts): the pool is that host's; a ticket with a live agent on any host still waits."""
    tickets = store.tickets()
    want = [t.id for t in tickets if t.state in _DISPATCHABLE]
    review = [t.id for t in tickets if t.state == lifecycle.REVIEW]  # the plan looks at no other ticket's proposals
    atts, props = budget.windows(store, want, proposals=review, resets=resets) if want else ({}, {})
    running = [a for a in store.agents(states=["running"]) if ours(a) and a.ticket_id]
    return core.DispatchInput(
        now=now, tickets=tickets, attempts=atts, proposals=props, live=dict(Counter(a.ticket_id for a in running if a.ticket_id)),
        pool_size=policy.fleet.pool_size, pool_used=None if host is None else sum(a.host == host for a in running), main_status=store.get_setting(keys.MAIN_STATUS, "unknown") or "unknown",
        paused=bool(store.get_setting(keys.DISPATCH_PAUSED, False)),
    )


# -- the shell ------------------------------------------------------------------------

@dataclass
class TickReport:
    at: float
    skipped: str | None = None  # why nothing was done (another dispatcher holds the fleet)
    reaped: list[str] = field(default_factory=list)
    launched: list[tuple[str, str]] = field(default_factory=list)  # (ticket, kind)
    merged: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    stopped: list[tuple[str, str]] = field(default_factory=list)  # (ticket, state)
    main: str = "unknown"
    plan: core.DispatchPlan | None = None


def preflight(policy: Policy) -> None:
    """Refuse to start a dispatcher whose loops would all exit 65 at once (and keep the notifiers' secrets
    from everything it starts, healer/notify/secrets.py).

    With the default loop command, every launch runs `healer loop run` with this policy;
    without an agent or without gates that loop cannot start, and the retry budget would
    burn five launches per ticket on a configuration mistake.
    """
    secrets.hold(policy)  # before the first launch: no loop, agent or gate inherits a notifier's secret
    argv = list(policy.fleet.loop_command)
    if not ("loop" in argv and "run" in argv and "{policy}" in argv):
        return  # a custom loop command: its own business
    problems = []
    if policy.loop.agent.preset == "command" and not policy.loop.agent.command:
        problems.append("loop.agent.command: expected the agent's argv (or preset: claude | codex), got nothing; "
                        "every ticket's loop would exit 65")
    if not policy.loop.gates:
        problems.append("loop.gates: expected at least one gate (the loop's stop criterion), got none; "
                        "every ticket's loop would exit 65")
    if problems:
        raise InvalidInput(f"dispatch: {problems[0]}", [f"dispatch: {p}" for p in problems])


class Dispatcher:
    """The pass and the daemon around it. The steps of a pass are its collaborators, each built in `__init__` with
    what it needs and in a file of its own: the `reaper` (healer/fleet/dispatch_reap.py), the `merger` for main and
    the merges (dispatch_merge.py), the `stopper` to needs-human or blocked (dispatch_stop.py) and the `launcher`
    (dispatch_launch.py)."""

    def __init__(self, root: str | Path, policy: Policy, store: Store, clock: Clock | None = None,
                 runtime: Runtime | None = None, *,
                 policy_path: str | Path | None = None, ports: Ports | None = None, host: str | None = None,
                 pid: int | None = None) -> None:
        self.root = Path(root).resolve()
        self.ports = ports or REAL
        self.git = self.ports.git
        self.policy = policy
        outage.set_tolerance(policy.store.outage_tolerance)  # this process rides out a store outage this long
        self.store = store
        self.clock = clock or system()
        self.real = system()  # real processes are waited for in real time
        if runtime is None:
            runtime = runtime_for(policy)
        self.runtime = runtime
        self._wake = threading.Event()  # set the moment an agent we launched exits: reap now, not at the next tick
        self._reaped = threading.Event()  # the reaper freed a slot: a full pass now launches into it
        self._reap_lock = threading.Lock()  # one reaper at a time (the tick's and the exit watch's)
        if hasattr(runtime, "on_exit"):
            runtime.on_exit(lambda _who: self._wake.set())
        self.rules = core.RetryRules.of(policy)
        self.host = host or host_id()
        self.machine = machine_id(self.root)  # this boot and root: rows an earlier host id wrote here are ours (issue 40)
        self.pid = pid or os.getpid()  # whose lease it is (the simulated world gives each incarnation a virtual pid)
        self.holder = f"dispatch@{self.host}:{self.pid}"
        self.policy_path = Path(policy_path).resolve() if policy_path else None
        self._stopping = False
        self._watching_since: float | None = None  # first pass: silence before it was our own downtime
        self.times = timewatch.for_clock(self.clock)  # wall-clock jumps and skews (healer/core/trusted_time.py)
        self._time: tuple = (None, None)  # this pass's (Timebase, TimeState)
        # another dispatcher's lease is taken as expired only on trusted time (its ttl is set each pass)
        self.lease_judge = timewatch.LeaseJudge(self.times, 90.0, policy.supervisor.clock_tolerance)
        self._resets = budget.Resets()  # budget resets read so far: each pass reads only the new moves
        self._memory = core_pass.PassMemory()  # the last launch plan, the disk's state: what the next pass starts from
        if not self.git.is_repo(self.root):
            raise UsageError(f"{self.root}: the fleet root must be a git repository (branch {policy.fleet.main_branch})")
        if self.git.rev(self.root, f"refs/heads/{policy.fleet.main_branch}") is None:
            raise UsageError(f"{self.root}: no branch {policy.fleet.main_branch!r} with a commit (fleet.main_branch); "
                             "commit something on it or set fleet.main_branch")
        self.disk = DiskWatch(self.root, getattr(store, "path", None), policy.fleet.min_free,
                              getattr(self.ports, "disk_free", None))
        self._readings: list = []  # this pass's free-space readings (taken before its first store write)
        self.shared = policy.fleet.shared_remote  # several hosts: merge by pushing to one shared repository
        if self.shared and (why := shared_main.check_remote(self.root, self.shared)):
            raise UsageError(why)
        # the collaborators: each given what it needs, none reaching into another or into this object
        me = Identity(self.host, self.machine, self.holder)
        self.mover = TicketMover(store)
        self.effects = EffectApplier(store, policy)
        main_ref = MainRef(store, self.root, policy.fleet.main_branch, self.shared)
        self.reaper = Reaper(store, runtime, self.git, self.ports.processes, policy, self.root, clock=self.clock, me=me,
                             mover=self.mover, shared=self.shared)
        self.merger = Merger(store, self.git, self.ports.gates, policy, self.root, clock=self.clock, real=self.real,
                             main_ref=main_ref, mover=self.mover, effects=self.effects, shared=self.shared)
        self.stopper = Stopper(store, policy, self.mover)
        self.launcher = AgentLauncher(store, self.git, self.ports.processes, runtime, policy, self.root, clock=self.clock,
                                      real=self.real, me=me, main_ref=main_ref, mover=self.mover, shared=self.shared,
                                      policy_path=self.policy_path)
        self._answer = answerer(self.reaper.answers(), self.merger.answers(), self._answers())

    # -- one pass -------------------------------------------------------------------
    def tick(self) -> TickReport:
        self._readings = self.disk.guard()  # first, before any store write: a full disk gets its reserve back now
        now = self.clock.now()
        rep = TickReport(at=now)
        self._time = self.times.read(self.store, self.policy.supervisor.clock_tolerance, "dispatcher", self.host)
        if self._watching_since is None:
            self._watching_since = self._time[0].now
        ttl = max(3 * self.policy.fleet.dispatch_tick, 90.0)
        # several hosts: this host's own lease (its heartbeat, and the fence on every write it makes) guards its agents;
        # the board's duties (main, merges, stops) stay with whichever host holds the board's lease
        mine = hosts.lease_name(self.host) if self.shared else LEASE
        if self.shared:
            ttl = self.policy.fleet.host_ttl
        before = self.store.lease(mine)
        self.lease_judge.ttl = ttl
        lease = self.store.acquire_lease(mine, self.holder, self.pid, self.host, ttl, pid_alive=pid_alive,
                                         expired=self.lease_judge)
        if lease is None:
            held = self.store.lease(mine)
            rep.skipped = f"another dispatcher ({held.holder if held else '?'}) holds the {'host' if self.shared else 'fleet'}"
            return rep
        if self.shared:
            self.store.hold(lease)  # fenced: once the leading supervisor has given this host up, its late writes are refused
        if before is not None and steps.died_holding(before.holder, self.holder, hosts.FENCED):
            # it never released the lease: it died (SIGKILL, a host crash), and agents that vanished with it were interrupted
            crashed = list(self.store.get_setting(keys.DISPATCH_CRASHED) or [])
            self.store.set_setting(keys.DISPATCH_CRASHED, [*crashed, before.holder][-50:])
        board = not self.shared or self.store.acquire_lease(LEASE, self.holder, self.pid, self.host, ttl,
                                                            pid_alive=pid_alive, expired=self.lease_judge) is not None
        left = self.git.sweep_scratch(self.root)  # we hold the lease: any scratch worktree is a crashed pass's leftover
        if left:
            self.store.append("dispatch.scratch_swept", "", {"paths": left})
        snap = self._snapshot(self.clock.now(), board)
        result = self._drive(core_pass.decide(snap, self.policy, self.rules, self._memory))
        rep.reaped, rep.main, rep.plan = list(result.reaped), result.main, result.plan
        rep.merged, rep.rejected = list(result.merged), list(result.rejected)
        rep.stopped, rep.launched = list(result.stopped), list(result.launched)
        return rep

    def _snapshot(self, now: float, board: bool) -> core_pass.PassSnapshot:
        """What the pure pass starts from (healer/core/dispatch_pass.py); what it needs later it asks for."""
        tb, ts = self._time
        return core_pass.PassSnapshot(
            now=now, host=self.host, machine=self.machine, board=board, shared=bool(self.shared),
            readings=tuple(self._readings), min_free=self.policy.fleet.min_free,
            steps_back=trusted_time.steps_back(ts) if ts is not None and ts.jumps else (), time=(tb, ts),
            watching_since=self._watching_since, switches=switches_now())

    def _drive(self, program: core_pass.Program) -> Any:
        """Carry out a pass's steps as the core yields them, each by its collaborator; the reaper's lock the core
        takes is let go whatever happens (an exception ends the pass, the next one retries)."""
        held: list[threading.Lock] = []

        def answer(step: Any) -> Any:
            if isinstance(step, core_pass.Exclusive):
                if step.hold:
                    self._reap_lock.acquire()
                    held.append(self._reap_lock)
                elif held:
                    held.pop().release()
                return None
            return self._answer(step)

        try:
            return core_pass.drive(program, answer)
        finally:
            while held:
                held.pop().release()

    def _answers(self) -> dict[type, Callable[[Any], Any]]:
        """The steps the Dispatcher itself carries out: reads of the board and settings, the launch and stop steps
        handed to their collaborators, the pass's record."""
        return {
            core_pass.ReadSetting: lambda s: self.store.get_setting(s.key),
            core_pass.Remember: self._remember,
            core_pass.Apply: lambda s: self.effects.apply(s.effects),
            core_pass.Reclaim: lambda _s: self.disk.reclaim(self.store),
            core_pass.ReadBoard: lambda _s: core_pass.BoardView(
                gather(self.store, self.policy, self.clock.now(), self.host if self.shared else None, self._resets),
                tuple(tuple(c) for c in self.store.get_setting(keys.DISPATCH_CYCLES) or [])),
            core_pass.StopTicket: lambda s: self.stopper.stop(s.stop),
            core_pass.LaunchAgent: self._launch,
            core_pass.TickRecord: self._record,
        }

    def _remember(self, step: core_pass.Remember) -> None:
        self._memory = step.memory

    def _launch(self, step: core_pass.LaunchAgent) -> str:
        # read right before each launch, not with the pass's view: a stop asked meanwhile (SIGTERM, the simulation's
        # frozen dispatcher) launches nothing more
        if self._stopping:
            return core_pass.STOPPING
        return core_pass.LAUNCHED if self.launcher.launch(step.launch) else core_pass.NOT_LAUNCHED

    def _record(self, step: core_pass.TickRecord) -> None:
        with self.store.tx():  # one commit for the pass's own record
            self.store.set_setting(keys.DISPATCH_LAST_TICK, self.clock.now())
            self.store.append("dispatch.tick", "", dict(step.payload))

    # -- running --------------------------------------------------------------------
    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait (in real time) until every agent process this dispatcher started has exited."""
        deadline = self.real.monotonic() + timeout
        for h in list(getattr(self.runtime, "children", lambda: [])()):
            left = deadline - self.real.monotonic()
            if left <= 0 or self.runtime.wait(h, left).state not in (EXITED, GONE):
                return False
        return True

    def stop_agents(self, grace: float = 2.0) -> None:
        """Stop every live agent this host launched (tests, `healer dispatch --stop-agents`)."""
        for a in self.store.agents(states=["running"]):
            if ours(a) and a.host == self.host:
                self.runtime.stop(handle_of(a), grace)

    @property
    def stopping(self) -> bool:
        """A stop was asked: the pass launches nothing more (the simulation holds a frozen dispatcher here)."""
        return self._stopping

    @stopping.setter
    def stopping(self, value: bool) -> None:
        self._stopping = value

    def stop(self, *_: Any) -> None:
        self._stopping = True
        self._wake.set()
        self._reaped.set()

    def release(self) -> None:
        self.store.release_lease(LEASE, self.holder)

    def run_forever(self, on_tick: Callable[[TickReport], object] | None = None) -> None:
        """Tick every `fleet.dispatch_tick` (on the monotonic clock: a wall-clock step neither stalls nor bunches the
        passes), and at once when an agent we launched exits (the runtime's exit watch wakes us), until `stop()`;
        agents keep running when the dispatcher ends."""
        period = max(1, int(round(self.policy.fleet.dispatch_tick)))

        def job() -> None:
            rep = self.pass_once()
            if on_tick and rep is not None:
                on_tick(rep)

        every = Every(self.clock, period)
        job()
        real = isinstance(self.clock, SystemClock)
        reaper = threading.Thread(target=self._reaper, name="reaper", daemon=True) if real else None
        if reaper is not None:
            reaper.start()
        url = getattr(self.store, "url", None)
        if real and url:  # a shared board (PostgreSQL): work queued on any host wakes us
            threading.Thread(target=self._board_watch, args=(url,), name="board-watch", daemon=True).start()
        try:
            while not self._stopping:
                if self._reaped.is_set() and not self._stopping:  # a slot was freed: launch into it, gate the proposal
                    self._reaped.clear()
                    job()
                if every.due():
                    job()
                pause = min(0.5, max(0.05, every.idle()))
                if real:
                    self._reaped.wait(pause)
                else:
                    self.clock.sleep(pause)
        finally:
            self._stopping = True
            self._wake.set()
            if reaper is not None:
                reaper.join(30)
        try:
            self.store.release_lease(LEASE, self.holder)
        except Exception:  # noqa: BLE001 - a store we cannot write keeps its lease until the ttl: harmless
            pass

    def pass_once(self) -> TickReport | None:
        """One tick that a failing git call or a full disk cannot end: one line, an event, the next pass retries.
        A lost store (deleted, replaced, read-only) ends the daemon (StoreLost): carrying on would split the fleet."""
        try:
            self.store.check()
            rep = self.tick()
            outage.ok(self.store, who="dispatch")
            return rep
        except (failpoints.FailpointError, StoreLost):
            raise
        except Exception as e:  # noqa: BLE001 - judged below; the daemon goes on
            raise_if_corrupt(self.store, e)  # damaged pages do not heal by retrying: one line, exit 74
            if outage.unavailable(e) and not host_trouble_or_corrupt(e):
                outage.failed(self.store, e, tried=False)  # one line per outage, not per pass; StoreGone past the tolerance
                return None
            if not transient(e) and "readonly" in str(e):
                raise StoreLost(f"{getattr(self.store, 'path', 'the store')}: the store is read-only now ({e}); stopping") from e
            raise_if_lost(self.store)
            report_failed_pass(self.store, "dispatch", e)
            return None

    def _board_watch(self, url: str) -> None:
        """LISTEN on the board from a connection of its own: a ticket added or requeued by another host (or a human)
        wakes the loop at once instead of at the next tick."""
        watcher = None
        while watcher is None and not self._stopping:
            try:
                watcher = open_url(url, migrate=False)
            except StoreUnavailable:  # the database is restarting: the passes ride it out, the watch waits for it
                self.clock.sleep(1.0)
            except Exception as e:  # noqa: BLE001 - the tick still runs; waking early is an optimisation
                logger.warning("board watch unavailable: {}", e)
                return
        if watcher is None:
            return

        try:
            seen = None
            while not self._stopping:
                try:  # the database restarting or away: wait (wait_for_events backs off) and pick up where we were
                    if seen is None:
                        seen = watcher.last_event_id()
                    last = watcher.wait_for_events(seen, 1.0)
                    if last <= seen:
                        continue
                    evs = watcher.events(after=seen, kinds=["ticket.created", "ticket.moved", "ticket.unlabeled"])
                except StoreUnavailable:
                    self.clock.sleep(0.5)
                    continue
                seen = last
                if any(e.kind != "ticket.moved" or e.payload.get("to") == lifecycle.QUEUED for e in evs):
                    self._reaped.set()
        except Exception as e:  # noqa: BLE001
            logger.warning("board watch stopped: {}", e)
        finally:
            watcher.close()

    def _renew_host(self) -> None:
        """Several hosts: renew this host's lease every second, not only at each pass (a pass that merges and
        gates for longer than fleet.host_ttl must not get a healthy host given up). Only a lease we hold is renewed:
        one the supervisor fenced is taken back by the next pass, which fences the writes with the new token."""
        try:
            name = hosts.lease_name(self.host)
            cur = self.store.lease(name)
            if cur is not None and cur.holder == self.holder:
                self.store.acquire_lease(name, self.holder, self.pid, self.host, self.policy.fleet.host_ttl,
                                         pid_alive=pid_alive)
        except Exception:  # noqa: BLE001 - the pass renews it too; a store outage is the pass's to report
            pass

    def reap_now(self) -> list[str]:
        """The pass's reaping alone (healer/core/dispatch_pass.py `reap`, orphans left to the pass: a launch in flight
        would look like one), the ended agents' results read side by side. The caller holds the reaper's lock."""
        side_by_side: dict[type, Callable[[Any], Any]] = {core_pass.ReadEnds: lambda s: self.reaper.read_ends(s.agents, workers=4)}
        answer = answerer(self.reaper.answers(), self.merger.answers(), self._answers(), side_by_side)
        return list(core_pass.drive(core_pass.reap(self._snapshot(self.clock.now(), False), orphans=False), answer))

    def _reaper(self) -> None:
        """Close the attempt of an agent that exited within the second, even while the main pass is busy merging."""
        while not self._stopping:
            self._wake.wait(1.0)
            if self.shared and not self._stopping:
                self._renew_host()
            if self._stopping or not self._wake.is_set():
                continue
            self._wake.clear()
            try:
                with self._reap_lock:
                    done = self.reap_now()
            except Exception as e:  # noqa: BLE001 - the next tick reaps what this pass could not
                report_failed_pass(self.store, "reaper", e)
                continue
            if done:
                self._reaped.set()


def install_signal_handlers(d: Dispatcher) -> None:
    signal.signal(signal.SIGTERM, d.stop)
    signal.signal(signal.SIGINT, d.stop)
