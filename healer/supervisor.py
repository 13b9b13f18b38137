"""The supervisor daemon: the imperative shell around the pure core (docs/supervisor.md).

One tick, level-triggered (every tick rebuilds its view from the store and the
world, so a missed event or a crash between ticks is harmless):

    lease        one supervisor per fleet (holder, pid, host, expiry); not ours -> skip
    recover      finish or roll back intents a dead process left half-done
    hosts        several hosts: a host whose lease expired is lost; fence it, requeue its tickets (healer/fleet/lost_hosts.py)
    snapshot     healer.fleet.snapshot.Gatherer (fail-open per data source; incremental by event id)
    core         healer.core.decide(snapshot, policy, memory)
    execute      healer.remedy.actions.execute, each planned action (the core keeps within max_actions_per_tick)
    alerts       healer.notify.notify (cooldown per key)
    repair       the repair-agent trigger (no-op without healer.repair.launcher)
    checkpoint   settings supervisor.memory, supervisor.last_tick_at; event supervisor.tick

`dry_run` (and `healer plan`) stop after `core`: no lease, no write of any kind.
"""

from __future__ import annotations

import copy
import os
import threading
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from healer import adopt as adoptmod
from healer import failpoints
from healer.clock import Clock, Every, stamp, system
from healer.core import decide as core_decide
from healer.core.memory import dump, forget_attempts, load
from healer.core.model import Decision, Memory, Snapshot
from healer.errors import StoreLost, transient
from healer.fleet import lost_hosts, timewatch
from healer.fleet import snapshot as snapmod
from healer.fleet.failed_pass import host_trouble_or_corrupt, raise_if_lost, report_failed_pass
from healer.fleet.ports import REAL, Ports
from healer.git import GitError
from healer.notify import notify, resolve_cleared, secrets
from healer.remedy import actions as remedy
from healer.remedy import limiter
from healer.remedy.limiter import ATTEMPT_ACTIONS
from healer.store import keys, open_store, outage
from healer.store.corrupt import raise_if_corrupt

FP_AFTER_LEASE = failpoints.declare("supervisor.after_lease", "healer/supervisor.py: lease taken, intents not yet recovered")
FP_BEFORE_EXECUTE = failpoints.declare("supervisor.before_execute", "healer/supervisor.py: plan decided, no action executed yet")
FP_AFTER_TICK = failpoints.declare("supervisor.after_tick", "healer/supervisor.py: tick checkpointed (memory, last_tick_at, event)")

LEASE = "supervisor"
ACTOR = "supervisor"
WAKE_POLL = 0.1  # seconds between looks at the store's newest event id (one indexed MAX(id))
WAKE_GAP = 0.5  # at most two woken ticks a second, however busy the fleet
QUIET = ("notify.", "dispatch.tick", "supervisor.", "lease.")  # bookkeeping that never changes a finding

if TYPE_CHECKING:
    from healer.core.incremental import Carry


class RepairLauncher:
    """The repair agent (healer/repair/launcher.py), the supervisor's to start (the fleet's ports have none)."""

    def launch(self, root: Path, policy: Any, store: Any, clock: Clock, *, reason: str, blockages: list[str]) -> Any:
        from healer.repair import launcher  # lazy: pulls pydantic, docker…: 535 ms of the daemons' start

        return launcher.launch(root, policy, store, clock, reason=reason, blockages=blockages)


# the machine's ports (healer/fleet/ports.py) and the repair agent
REAL_PORTS = Ports(REAL.git, REAL.gates, REAL.processes, RepairLauncher(), REAL.disk_free)


class StoreChanges:
    """Has anyone written something that could change a finding since we last looked?"""

    def __init__(self, store) -> None:
        self.store = store
        self.seen = 0
        self.absorb()

    def poll(self) -> bool:
        """False while the store is away (the tick says so, once per outage): there is nothing to be woken by."""
        try:
            cur = self.store.last_event_id()
            if cur <= self.seen:
                return False
            heads = self.store.event_heads(after=self.seen, limit=2000)
        except Exception as e:
            if outage.unavailable(e):
                return False
            raise
        self.seen = heads[-1][0] if len(heads) == 2000 else cur
        return any(not kind.startswith(QUIET) for _, kind, _ in heads)

    def wait(self, waiter, pause: float) -> None:
        """`waiter(seen, pause)`; a store that is away is waited out for `pause` (its backoff says when to retry)."""
        try:
            waiter(self.seen, pause)
        except Exception as e:
            if not outage.unavailable(e):
                raise
            self.store.clock.sleep(pause)

    def absorb(self) -> None:
        try:
            self.seen = self.store.last_event_id()
        except Exception as e:
            if not outage.unavailable(e):
                raise


@dataclass
class TickReport:
    at: float
    skipped: str | None = None  # why the tick did nothing (lease held by someone else)
    dry_run: bool = False
    snapshot: Snapshot | None = None
    decision: Decision | None = None
    outcomes: list[tuple[Any, remedy.Outcome]] = field(default_factory=list)  # (PlannedAction, Outcome)
    overflow: list[Any] = field(default_factory=list)  # planned but not executed (none since the core caps the tick)
    recovered: list[remedy.Outcome] = field(default_factory=list)
    alerts_sent: int = 0
    resolved: list[str] = field(default_factory=list)  # alert keys whose condition cleared (told to Alertmanager)
    repair: str | None = None
    duration: float = 0.0

    def summary(self) -> dict[str, Any]:
        d = self.decision
        by: dict[str, int] = {}
        for _, o in self.outcomes:
            by[o.status] = by.get(o.status, 0) + 1
        return {
            "at": self.at, "skipped": self.skipped, "dry_run": self.dry_run,
            "findings": len(d.findings) if d else 0, "planned": len(d.actions) if d else 0,
            "deferred": len(d.deferred) if d else 0, "outcomes": by, "overflow": len(self.overflow),
            "recovered": len(self.recovered), "alerts_sent": self.alerts_sent, "repair": self.repair,
            "failed_sources": sorted(self.snapshot.failed_sources) if self.snapshot else [],
            "duration_ms": round(self.duration * 1000, 1),
        }


def decide(snapshot: Snapshot, policy, memory: Memory) -> Decision:
    """The core's decide, imported late so the shell works (and is testable) on its own."""
    return core_decide(snapshot, policy, memory)


def load_memory(store) -> Memory:
    return _memory_from(store.get_setting(keys.SUPERVISOR_MEMORY))


def _memory_from(raw) -> Memory:
    if not raw:
        return Memory()
    try:
        return load(raw)
    except Exception as e:  # noqa: BLE001 - a damaged memory costs debounce state, never the tick
        logger.warning("supervisor memory unreadable ({}); starting fresh", e)
        return Memory()


def _without_untried(memory: Memory, rep, now: float) -> Memory:
    """Memory minus the attempts the executor never made (refused or aborted before acting, or over the cap)."""
    tried: set[str] = set()
    untried: set[str] = set()
    # keyed as the core keys attempts: by the finding's subject, the ticket for a ticket's actions (a stop_agent's own
    # subject is the agent): a rule's later step aborted (requeue after stop_agent already requeued) must not erase
    # the attempt its first step made, or `escalate_after` never counts up on such a rule
    for a, o in rep.outcomes:
        if a.action in ATTEMPT_ACTIONS:
            (untried if o.status in ("refused", "aborted") else tried).add(_attempt_key(a))
    untried |= {_attempt_key(a) for a in rep.overflow if a.action in ATTEMPT_ACTIONS}
    return forget_attempts(memory, untried - tried, now)


def _attempt_key(a) -> str:
    return a.params.get("ticket") or a.subject


def with_external_attempts(memory: Memory, store, policy, now: float, actor: str = ACTOR,
                           humans: limiter.HumanLog | None = None) -> Memory:
    """Add the unblock attempts of other actors (humans, the repair agent) so the core's quiet period sees them."""
    window = max(policy.remediation.quiet_period, policy.repair_agent.quiet_period)
    extra = limiter.recent_attempts(store, now - window, exclude_actor=actor, humans=humans)
    # every repair run the event log knows (operator runs, runs of a supervisor that died) counts to the daily cap
    runs = sorted(set(memory.repair_runs) | {e.at for e in store.events(kinds=["repair.started"], since=now - 2 * 86400.0)})
    if not extra and runs == list(memory.repair_runs):
        return memory
    attempts = {k: list(v) for k, v in memory.attempts.items()}
    for subject, times in extra.items():
        have = set(attempts.get(subject, []))
        attempts[subject] = sorted(have | set(times))

    return replace(memory, attempts=attempts, repair_runs=runs)


class Supervisor:
    def __init__(self, root: str | Path, policy, store, clock: Clock | None = None, runtime=None, *,
                 dry_run: bool = False, holder: str | None = None, metrics=None, repair_async: bool = False,
                 ports=None, host: str | None = None, pid: int | None = None, lease_host: str | None = None,
                 proctable=None) -> None:
        self.ports = ports or REAL_PORTS
        self.proctable = proctable  # adopted loops' process table (healer/adopt.py: ProcTable); None: this host's /proc

        outage.set_tolerance(policy.store.outage_tolerance)  # this process rides out a store outage this long
        if self.ports is REAL_PORTS and not dry_run:  # a dry run starts nothing (a Chaos Toolkit probe's process keeps its env)
            secrets.hold(policy)  # a repair agent it starts must not inherit a notifier's secret
        self.root = Path(root).resolve()
        self.policy = policy
        self.store = store
        self.clock = clock or system()
        if runtime is None:
            try:
                from healer.fleet.runtimes import runtime_for  # lazy: pulls docker: 58 ms of the daemons' start

                runtime = runtime_for(policy, self.clock)
            except Exception as e:  # noqa: BLE001 - no runtime: liveness falls back to pids (fail-open)
                logger.warning("no agent runtime ({}); judging liveness by pid", e)
        self.runtime = runtime
        self.dry_run = dry_run
        self.host = host or snapmod.HOST  # whose agents this supervisor can see (liveness, reclaims)
        # the host its lease names (a holder on the same host is judged by pid); the simulated world gives its
        # virtual holders a host of their own, whatever the agents' host
        self.lease_host = lease_host or self.host
        self.pid = pid or os.getpid()
        self.holder = holder or f"supervisor@{self.host}:{self.pid}:{uuid.uuid4().hex[:6]}"
        self.metrics = metrics
        self.repair_async = repair_async
        self._repair_thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.ticks = 0
        self._hosts_seen: dict[str, float] = {}  # several hosts: when this leader first saw each host's lease expired
        self.gatherer = snapmod.Gatherer()  # incremental between ticks; a full read first and every FULL_EVERY
        self.carry: Carry | None = None  # the incremental decision's carry-over (healer/core/incremental.py); None: from scratch
        self._ctx: remedy.Context | None = None
        self._memory: tuple[Any, Memory | None] | None = None  # (the stored form, what it loads as): a quiet tick loads nothing
        self._memory_token: int | None = None  # the supervisor lease's token when _memory was last read from the store
        self.humans = limiter.HumanLog()  # the humans' unblock attempts, read by event id between ticks
        self.times = timewatch.for_clock(self.clock)  # wall-clock jumps and skews (healer/core/trusted_time.py)
        # another holder's lease is taken as expired only on a clock this process can trust (or watched unrenewed
        # for its ttl on the monotonic clock): a step neither steals it from a live leader nor keeps it for a dead one
        self.lease_judge = timewatch.LeaseJudge(self.times, policy.supervisor.lease_ttl, policy.supervisor.clock_tolerance)

    def context(self, batch: str | None = None) -> remedy.Context:
        c = self._ctx
        if c is None or c.policy is not self.policy or c.runtime is not self.runtime or c.store is not self.store:
            sim = self.ports is not REAL_PORTS
            c = self._ctx = remedy.Context(self.root, self.store, self.policy, self.clock, self.runtime, ACTOR, host=self.host,
                                           processes=self.ports.processes if sim else None, git=self.ports.git if sim else None,
                                           proctable=self.proctable)
        # a copy per batch, without resolving the root again (it was resolved once, when this supervisor began)
        c = copy.copy(c)
        c.batch = batch
        return c

    # -- one tick ---------------------------------------------------------------------
    def plan(self) -> TickReport:
        """Snapshot and decide; write nothing (healer plan, --dry-run)."""
        rep = TickReport(at=self.clock.now(), dry_run=True)
        t0 = self.clock.monotonic()
        tb, times = self.times.peek()  # a plan writes nothing: what this process knows of its clocks, no new reading
        rep.snapshot = snapmod.gather(self.root, self.store, self.policy, self.clock, self.runtime, host=self.host, ports=self.ports)
        rep.snapshot = replace(rep.snapshot, time=tb, clock=times)
        rep.snapshot = self._with_adopted(rep.snapshot, write=False)
        memory = with_external_attempts(load_memory(self.store), self.store, self.policy, rep.snapshot.now)
        rep.decision = decide(rep.snapshot, self.policy, memory)
        rep.duration = self.clock.monotonic() - t0
        return rep

    def tick(self) -> TickReport:
        if self.dry_run:
            return self.plan()
        t0 = self.clock.monotonic()
        now = self.clock.now()
        rep = TickReport(at=now)
        # the clocks, read first (a standby too: its lease judgement needs to know of a jump before it leads)
        tb, times = self.times.read(self.store, self.policy.supervisor.clock_tolerance, "supervisor", self.host)
        lease = self.store.acquire_lease(LEASE, self.holder, self.pid, self.lease_host, self.policy.supervisor.lease_ttl,
                                         pid_alive=self.ports.processes.alive, expired=self.lease_judge)
        # every write of this tick carries the lease's fencing token: a holder paused past its ttl (SIGSTOP,
        # a partition) and overtaken has its late writes refused and recorded (lease.stale_write_refused)
        self.store.hold(lease)
        if lease is None:
            self._hosts_seen.clear()  # a leader judges only the silence it watched itself
            cur = self.store.lease(LEASE)
            rep.skipped = f"lease held by {cur.holder}" if cur else "lease not available"
            self.store.append("supervisor.skipped", LEASE, {"holder": self.holder, "reason": rep.skipped})
            self._observe(rep, t0)
            return rep
        failpoints.hit(FP_AFTER_LEASE)
        self.ticks += 1
        batch = f"tick-{stamp(now)}-{self.holder}"
        ctx = self.context(batch)
        rep.recovered = remedy.recover(ctx)
        if rep.recovered:
            by: dict[str, int] = {}
            for o in rep.recovered:
                by[o.status] = by.get(o.status, 0) + 1
            self.store.append("supervisor.recovered", LEASE, {"holder": self.holder, "intents": [o.intent_id for o in rep.recovered],
                                                               "outcomes": by})

        if self.policy.fleet.shared_remote:  # several hosts: the leader takes back what a lost host held
            # judged on the reading's clock (the server's): a step of this host's clock loses no other host
            taken = lost_hosts.reclaim(self.store, tb.now, self.host, self.holder, self._hosts_seen,
                                  self.policy.fleet.host_ttl / 2)
            if taken:
                logger.warning("took back {} ticket(s) of lost host(s): {}", len(taken), taken)

        snap = self.gatherer.gather(self.root, self.store, self.policy, self.clock, self.runtime, host=self.host, ports=self.ports)
        # this tick is a supervisor tick: the downtime before it (a restart) is no silence to page about
        # judged on the clock of the reading (PostgreSQL: the server's, one clock for every host; else this host's)
        rep.snapshot = snap = replace(snap, now=tb.now, last_supervisor_tick=tb.now, time=tb, clock=times)
        rep.snapshot = snap = self._with_adopted(snap, write=True)
        memory = with_external_attempts(self._load_memory(lease.token), self.store, self.policy, snap.now, humans=self.humans)
        rep.decision = d = self._decide(snap, memory)
        failpoints.hit(FP_BEFORE_EXECUTE)

        # the blast radius (remediation.max_actions_per_tick) has one definition, the core's limits.BlastRadius: it
        # defers whatever is beyond it, so every planned action is within it (tests/supervisor/test_core_props.py)
        for a in d.actions:
            rep.outcomes.append((a, remedy.execute(ctx, a)))

        for al in d.alerts:
            try:
                rep.alerts_sent += bool(notify(self.store, self.policy, al.key, al.text, severity=al.severity,
                                               evidence=al.evidence, clock=self.clock))
            except Exception as e:  # noqa: BLE001 - the store refusing a notification must not end the tick
                logger.error("alert {} failed: {}", al.key, e)
        try:  # conditions that cleared: Alertmanager is told (endsAt); a no-op without a notifier that takes resolves
            rep.resolved = resolve_cleared(self.store, self.policy, d.findings, main_green=snap.main_status == "green",
                                           failed_sources=snap.failed_sources)
        except Exception as e:  # noqa: BLE001 - an unresolved alert ends at its hold; the tick goes on
            logger.error("resolving cleared alerts failed: {}", e)

        rep.repair = self._repair_hook(d)

        stored = _dump(_without_untried(d.memory, rep, snap.now))
        rep.duration = self.clock.monotonic() - t0
        with self.store.tx():  # the checkpoint is one commit: memory, last tick and its event, or none of them
            wrote = self._checkpoint_memory(stored)
            self.store.set_setting(keys.SUPERVISOR_LAST_TICK, tb.now)  # the dispatcher judges it on the same clock
            self.store.append("supervisor.tick", LEASE, {"holder": self.holder, **_event_summary(rep)})
        if wrote:
            self._memory = (stored, None)  # committed: what the store holds now, decoded if the next tick needs it
        failpoints.hit(FP_AFTER_TICK)
        self._observe(rep, t0)
        return rep

    def _with_adopted(self, snap: Snapshot, *, write: bool) -> Snapshot:
        """The loops healer did not launch (docs/adopt.md): scanned for and observed when the policy's adopt section
        is enabled; a scan that breaks leaves the adopted loops unjudged this tick (fail-open), never the fleet."""
        if not (self.policy.adopt.enabled and self.policy.adopt.rules):
            return snap
        try:
            if write:
                adoptmod.scan(self.store, self.policy, self.clock, self.proctable, host=self.host)
            views = adoptmod.observe(self.store, self.policy, self.clock, self.proctable, host=self.host, write=write)
        except (OSError, GitError) as e:
            logger.warning("adopted loops not observed this tick: {}", e)
            return replace(snap, failed_sources=snap.failed_sources | {"adopt"})
        return replace(snap, adopted=views)

    def _load_memory(self, token: int) -> Memory:
        """The stored memory. Only the supervisor lease's holder writes it (fenced by the lease's token), so while
        this supervisor holds the lease under the same token as when it last read or wrote the memory, the store
        holds what it has: not read again. Otherwise read, and decoded only when it differs from what it had
        (the core never changes a Memory it is given: it builds a new one)."""
        hit = self._memory
        if hit is not None and self._memory_token == token:
            decoded = hit[1]
            if decoded is None:
                decoded = _memory_from(hit[0])
                self._memory = (hit[0], decoded)
            return decoded
        raw = self.store.get_setting(keys.SUPERVISOR_MEMORY)
        mem = hit[1] if hit is not None and hit[1] is not None and hit[0] == raw else _memory_from(raw)
        self._memory, self._memory_token = (raw, mem), token
        return mem

    def _checkpoint_memory(self, memory: dict) -> bool:
        """Persist the memory for the next tick (or the next supervisor), inside the checkpoint's transaction; what
        the store already holds (read or written this tick: only the lease holder writes it) is not written again.
        True when it was written (the caller notes it once the transaction committed)."""
        stored = self._memory[0] if self._memory is not None else self.store.get_setting(keys.SUPERVISOR_MEMORY)
        if memory == stored:
            return False
        self.store.set_setting(keys.SUPERVISOR_MEMORY, memory)
        return True

    def _decide(self, snap: Snapshot, memory: Memory) -> Decision:
        """The core's decision, incremental between ticks (the same answer as `decide`, property-tested); from
        scratch whenever the snapshot was a full read (a restart, the scheduled re-read)."""
        from healer.core import incremental  # lazy: healer.core.incremental: 6.8 ms of the daemons' start

        board = self.gatherer.board
        carry = self.carry if board is not None and board.last != "full" else None
        self.carry = None  # a decision that raises leaves no carry behind
        d, self.carry = incremental.decide(snap, self.policy, memory, carry)
        return d

    # -- repair trigger -----------------------------------------------------------------
    def _repair_hook(self, d: Decision) -> str | None:
        """REPAIR TRIGGER CALL SITE: launch the repair agent when the core says so (docs/repair.md).

        A run takes up to repair_agent.timeout, so the daemon runs it in a thread (one at a time) and keeps ticking; --once waits for it.
        """
        if not d.repair:
            return None
        launcher = self.ports.launcher
        if launcher is None:  # ports without a repair agent
            return "no repair launcher"
        if self._repair_thread is not None and self._repair_thread.is_alive():
            return "repair agent already running"
        reason = getattr(d, "repair_reason", "") or "blockage persisted past every ceiling"
        blockages = [f.key for f in d.findings if f.status != "unknown"]

        def run() -> None:
            st = open_store(self.root, self.clock) if self.repair_async else self.store
            try:
                launcher.launch(self.root, self.policy, st, self.clock, reason=reason, blockages=blockages)
            except Exception as e:  # noqa: BLE001 - a failed repair run is journaled, the supervisor goes on
                st.append("repair.failed", "supervisor", {"reason": f"{type(e).__name__}: {e}"})
            finally:
                if st is not self.store:
                    st.close()

        if self.repair_async:
            self._repair_thread = threading.Thread(target=run, name="repair-agent", daemon=True)
            self._repair_thread.start()
            return "repair agent launched (background)"
        run()
        return "repair agent ran"

    # -- metrics ------------------------------------------------------------------------
    def _observe(self, rep: TickReport, t0: float) -> None:
        rep.duration = rep.duration or (self.clock.monotonic() - t0)
        if self.metrics is not None:
            self.metrics.observe(rep)

    # -- daemon -------------------------------------------------------------------------
    def stop(self, *_: Any) -> None:
        self._stopping.set()

    def tick_once(self) -> tuple[TickReport | None, float | None]:
        """One tick of the daemon that a failing pass cannot end (one line, an event, the next tick retries): the
        report (None when the tick failed) and, for a standby, the monotonic time at which the leader's lease
        expires (when to try again: takeover within the ttl). A lost store (StoreLost) and a failpoint end it.
        The simulated world ticks through here too, so what a failed tick does is the daemon's, in both worlds."""
        try:
            self.store.check()
            rep = self.tick()
            cur = self.store.lease(LEASE) if rep.skipped else None
            outage.ok(self.store, who="supervisor")
        except (failpoints.FailpointError, StoreLost):
            raise
        except Exception as e:  # noqa: BLE001 - one bad tick is journaled; the next one starts from scratch
            raise_if_corrupt(self.store, e)  # damaged pages do not heal by retrying: one line, exit 74
            if outage.unavailable(e) and not host_trouble_or_corrupt(e):
                outage.failed(self.store, e, tried=False)  # one line per outage; StoreGone past store.outage_tolerance
                return None, None
            if not transient(e) and "readonly" in str(e):
                raise StoreLost(f"{self.store.path}: the store is read-only now ({e}); stopping") from e
            raise_if_lost(self.store)
            report_failed_pass(self.store, "supervisor", e)
            return None, None
        if cur is None:
            return rep, None
        return rep, self.clock.monotonic() + self.lease_judge.wait(LEASE, cur.expires_at, self.store.now())

    def run_forever(self, on_tick=None) -> None:
        """Tick every supervisor.tick (on the monotonic clock: a wall-clock step neither stalls nor bunches the ticks),
        and within WAKE_POLL + a tick when another process writes an event that could change a finding, until stop();
        release the lease on the way out."""
        period = max(1, int(round(self.policy.supervisor.tick)))
        retry_at: list[float] = []  # a standby wakes when the leader's lease expires, not at its next tick: takeover within the ttl

        def job() -> None:
            retry_at.clear()
            rep, retry = self.tick_once()
            if retry is not None:
                retry_at.append(retry)
            if rep is not None and on_tick:
                on_tick(rep)

        every = Every(self.clock, period)
        job()
        changes = StoreChanges(self.store)
        last_woken = self.clock.monotonic()
        try:
            while not self._stopping.is_set():
                # woken by what others write (an agent ended, a ticket moved, main went red): the tick is the safety net
                if self.clock.monotonic() - last_woken >= WAKE_GAP and changes.poll():
                    last_woken = self.clock.monotonic()
                    job()
                    changes.absorb()  # our own writes do not wake us
                if retry_at and self.clock.monotonic() >= retry_at[0]:
                    job()
                if every.due():
                    job()
                pause = min(WAKE_POLL, max(0.02, every.idle()))
                if retry_at:  # wake at the leader's expiry, not after it
                    pause = max(0.0, min(pause, retry_at[0] - self.clock.monotonic()))
                waiter = getattr(self.store, "wait_for_events", None)
                if waiter is not None:
                    changes.wait(waiter, pause)  # returns early on a new event (PostgreSQL: NOTIFY from any host)
                else:
                    self.clock.sleep(pause)
        finally:
            if self._repair_thread is not None:
                self._repair_thread.join(timeout=1)
            if not self.dry_run:
                try:
                    self.store.release_lease(LEASE, self.holder)
                except Exception:  # noqa: BLE001 - a store we cannot write keeps its lease until the ttl: harmless
                    pass


def _dump(memory: Memory) -> dict:
    return dump(memory)


def _event_summary(rep: TickReport) -> dict[str, Any]:
    d = rep.decision
    return {
        "findings": len(d.findings) if d else 0,
        "kinds": sorted({f.kind for f in d.findings}) if d else [],
        "planned": len(d.actions) if d else 0,
        "deferred": len(d.deferred) if d else 0,
        "outcomes": [{"action": a.action, "subject": a.subject, "status": o.status} for a, o in rep.outcomes][:50],
        "overflow": len(rep.overflow),
        "recovered": len(rep.recovered),
        "alerts_sent": rep.alerts_sent,
        "repair": rep.repair,
        "failed_sources": sorted(rep.snapshot.failed_sources) if rep.snapshot else [],
        "duration_ms": round(rep.duration * 1000, 1),
    }
