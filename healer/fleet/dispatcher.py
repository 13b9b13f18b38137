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

Decisions use `clock` (virtual in tests); waiting for real processes uses real time.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from healer import conventions as cv
from healer import failpoints, git, lifecycle, switches
from healer.clock import Clock, SystemClock, iso, system
from healer.core import dispatch as core
from healer.core import endings, hosts
from healer.core import fleet as fleet_rules
from healer.errors import StaleLease, host_trouble
from healer.files import write_atomic
from healer.fleet import budget, shared_main
from healer.fleet.gates import PASS
from healer.fleet.lost_hosts import host_id
from healer.fleet.ports import REAL, Ports
from healer.fleet.proposals import DEFERRED, MERGED, WITHHELD, rejection_reason
from healer.fleet.results import read_result as _read_result
from healer.fleet.runtime import EXITED, GONE, RUNNING, Handle, LaunchSpec, Runtime
from healer.records import Agent, Attempt, Proposal, Ticket, Worktree
from healer.store import keys

FP_AFTER_LAUNCH = failpoints.declare("dispatch.after_launch", "healer/fleet/dispatcher.py: agent started and registered, before the launch event")
FP_MERGE_RECORDED = failpoints.declare("dispatch.merge_recorded", "healer/fleet/dispatcher.py: proposal marked merged and its "
                                       "commit on the ticket, ticket not yet done (one transaction: a crash here "
                                       "records none of it)")

ACTOR = cv.DISPATCH_ACTOR
LEASE = cv.DISPATCH_LEASE
NEEDS_HUMAN_LABEL = cv.NEEDS_HUMAN_LABEL
branch_for, worktree_for, result_path = cv.branch_for, cv.worktree_for, cv.result_path


def agent_id_for(ticket_id: str, attempt_id: int) -> str:
    return f"agent-{ticket_id}-{attempt_id}"


def ours(a: Agent) -> bool:
    return a.data.get("launched_by") == ACTOR


# -- gathering what the pure core needs --------------------------------------------

budget_window = budget.window  # one ticket's attempts and proposals since its budget was last reset


def live_counts(store) -> Counter:
    return Counter(a.ticket_id for a in store.agents(states=["running"]) if ours(a) and a.ticket_id)


_DISPATCHABLE = frozenset({lifecycle.QUEUED, lifecycle.REVIEW})  # the states a plan can launch from


def gather(store, policy, now: float, host: str | None = None, resets: budget.Resets | None = None) -> core.DispatchInput:
    """`host` (several hosts): the pool is that host's; a ticket with a live agent on any host still waits."""
    tickets = store.tickets()
    want = [t.id for t in tickets if t.state in _DISPATCHABLE]
    review = [t.id for t in tickets if t.state == lifecycle.REVIEW]  # the plan looks at no other ticket's proposals
    atts, props = budget.windows(store, want, proposals=review, resets=resets) if want else ({}, {})
    running = [a for a in store.agents(states=["running"]) if ours(a) and a.ticket_id]
    return core.DispatchInput(
        now=now, tickets=tickets, attempts=atts, proposals=props, live=dict(Counter(a.ticket_id for a in running)),
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


def preflight(policy) -> None:
    """Refuse to start a dispatcher whose loops would all exit 65 at once (and keep the notifiers' secrets
    from everything it starts, healer/notify/secrets.py).

    With the default loop command, every launch runs `healer loop run` with this policy;
    without an agent or without gates that loop cannot start, and the retry budget would
    burn five launches per ticket on a configuration mistake.
    """
    from healer.errors import InvalidInput
    from healer.notify import secrets

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
    def __init__(self, root: str | Path, policy, store, clock: Clock | None = None, runtime: Runtime | None = None, *,
                 policy_path: str | Path | None = None, ports: Ports | None = None, host: str | None = None,
                 pid: int | None = None) -> None:
        self.root = Path(root).resolve()
        self.ports = ports or REAL
        self.git = self.ports.git
        self.policy = policy
        from healer.store import outage

        outage.set_tolerance(policy.store.outage_tolerance)  # this process rides out a store outage this long
        self.store = store
        self.clock = clock or system()
        self.real = system()  # real processes are waited for in real time
        if runtime is None:
            from healer.fleet.runtimes import runtime_for

            runtime = runtime_for(policy)
        self.runtime = runtime
        self._wake = threading.Event()  # set the moment an agent we launched exits: reap now, not at the next tick
        self._reaped = threading.Event()  # the reaper freed a slot: a full pass now launches into it
        self._reap_lock = threading.Lock()  # one reaper at a time (the tick's and the exit watch's)
        if hasattr(runtime, "on_exit"):
            runtime.on_exit(lambda _who: self._wake.set())
        self.rules = core.RetryRules.of(policy)
        self.host = host or host_id()
        self.pid = pid or os.getpid()  # whose lease it is (the simulated world gives each incarnation a virtual pid)
        self.holder = f"dispatch@{self.host}:{self.pid}"
        self.policy_path = Path(policy_path).resolve() if policy_path else None
        self._stopping = False
        self._watching_since: float | None = None  # first pass: silence before it was our own downtime
        self._resets = budget.Resets()  # budget resets read so far: each pass reads only the new moves
        self._plan: core.Carry | None = None  # the last plan: a pass over an unchanged board plans nothing anew
        from healer.errors import UsageError

        if not self.git.is_repo(self.root):
            raise UsageError(f"{self.root}: the fleet root must be a git repository (branch {policy.fleet.main_branch})")
        if self.git.rev(self.root, f"refs/heads/{policy.fleet.main_branch}") is None:
            raise UsageError(f"{self.root}: no branch {policy.fleet.main_branch!r} with a commit (fleet.main_branch); "
                             "commit something on it or set fleet.main_branch")
        from healer.fleet.disk import DiskWatch

        self.disk = DiskWatch(self.root, getattr(store, "path", None), policy.fleet.min_free,
                              getattr(self.ports, "disk_free", None))
        self._readings: list = []  # this pass's free-space readings (taken before its first store write)
        self._disk_low: bool | None = None  # None: not known yet (the store's setting says, on the first pass)
        self.shared = policy.fleet.shared_remote  # several hosts: merge by pushing to one shared repository
        if self.shared and (why := shared_main.check_remote(self.root, self.shared)):
            raise UsageError(why)

    # -- one pass -------------------------------------------------------------------
    def tick(self) -> TickReport:
        self._readings = self.disk.guard()  # first, before any store write: a full disk gets its reserve back now
        now = self.clock.now()
        rep = TickReport(at=now)
        if self._watching_since is None:
            self._watching_since = now
        ttl = max(3 * self.policy.fleet.dispatch_tick, 90.0)
        from healer.store.sqlite import pid_alive

        # several hosts: this host's own lease (its heartbeat, and the fence on every write it makes) guards its agents;
        # the board's duties (main, merges, stops) stay with whichever host holds the board's lease
        mine = hosts.lease_name(self.host) if self.shared else LEASE
        if self.shared:
            ttl = self.policy.fleet.host_ttl
        before = self.store.lease(mine)
        lease = self.store.acquire_lease(mine, self.holder, self.pid, self.host, ttl, pid_alive=pid_alive)
        if lease is None:
            held = self.store.lease(mine)
            rep.skipped = f"another dispatcher ({held.holder if held else '?'}) holds the {'host' if self.shared else 'fleet'}"
            return rep
        if self.shared:
            self.store.hold(lease)  # fenced: once the leading supervisor has given this host up, its late writes are refused
        if before is not None and before.holder != self.holder and not before.holder.startswith(hosts.FENCED):
            # it never released the lease: it died (SIGKILL, a host crash), and agents that vanished with it were interrupted
            crashed = list(self.store.get_setting(keys.DISPATCH_CRASHED) or [])
            self.store.set_setting(keys.DISPATCH_CRASHED, [*crashed, before.holder][-50:])
        board = not self.shared or self.store.acquire_lease(LEASE, self.holder, self.pid, self.host, ttl,
                                                            pid_alive=pid_alive) is not None
        left = self.git.sweep_scratch(self.root)  # we hold the lease: any scratch worktree is a crashed pass's leftover
        if left:
            self.store.append("dispatch.scratch_swept", "", {"paths": left})
        low = self.check_disk()
        with self._reap_lock:
            rep.reaped = self.reap()
        self.heartbeat()
        if board and not low:  # a low disk holds main's gates and the merges too: a gate failing for want of space
            rep.main = self.check_main()  # would turn main red or reject a good proposal (the infrastructure's, not the work's)
            if rep.main != "red":
                self.review(rep)
        else:
            rep.main = self.store.get_setting(keys.MAIN_STATUS, "unknown") or "unknown"
        inp = gather(self.store, self.policy, self.clock.now(), self.host if self.shared else None, self._resets)
        if low and not inp.paused:  # held here too: the pause may not have reached the store (or is not ours to set)
            from dataclasses import replace

            inp = replace(inp, paused=True)
        plan, self._plan = core.replan(inp, self.rules, self._plan)
        rep.plan = plan
        if board:
            self._note_cycles(plan)
            for s in plan.stops:
                self._stop(s)
                rep.stopped.append((s.ticket_id, s.to))
        for launch in plan.launches:
            if self._stopping:
                break
            if self._launch(launch):
                rep.launched.append((launch.ticket_id, launch.kind))
        if board:
            self.watch_supervisor()
        with self.store.tx():  # one commit for the pass's own record
            self.store.set_setting(keys.DISPATCH_LAST_TICK, self.clock.now())
            self.store.append("dispatch.tick", "", {"launched": len(rep.launched), "reaped": len(rep.reaped),
                                                    "main": rep.main, "live": plan.live_total + len(rep.launched),
                                                    "pool": plan.pool_size, "waiting": len(plan.waiting),
                                                    "merged": len(rep.merged), "rejected": len(rep.rejected)})
        return rep

    def check_disk(self) -> bool:
        """Disk pressure (healer/core/disk.py): record a change between low and not low (event, pause, page), and
        while low reclaim healer's own files of finished tickets. True while low: nothing is launched."""
        from healer.core import disk

        readings, mf = self._readings, self.policy.fleet.min_free
        if not readings or mf <= 0:
            return False
        low = bool(disk.low(readings, mf))
        if self._disk_low is None:
            self._disk_low = self.store.get_setting(disk.SETTING) is not None
        if low == self._disk_low:  # no change: nothing to record (and no reads on the common pass)
            if low:
                self.disk.reclaim(self.store)
            return low
        effects = disk.disk_changed(readings, mf, was_low=self._disk_low, now=self.clock.now(),
                                    paused=bool(self.store.get_setting(keys.DISPATCH_PAUSED, False)) or bool(self.shared),
                                    paused_reason=self.store.get_setting(keys.DISPATCH_PAUSED_REASON))
        self.apply(effects)
        self._disk_low = low
        if low:
            self.disk.reclaim(self.store)
        return low

    def watch_supervisor(self) -> None:
        """Who watches the watcher: a supervisor that ticked once and then fell silent is a finding
        the supervisor itself cannot report, so the dispatcher raises it (one notification per cooldown)."""
        now = self.clock.now()
        last = self.store.get_setting(keys.SUPERVISOR_LAST_TICK)
        threshold = self.policy.sentinels.supervisor_silent
        # a watcher judges only the silence it watched: a restart's downtime is not the supervisor's
        watched = None if last is None else max(float(last), self._watching_since or float(last))
        silent = fleet_rules.supervisor_silent(watched, now, threshold)
        if silent is not None:
            from healer import durations
            from healer.notify import notify

            notify(self.store, self.policy, "supervisor_silent",
                   f"supervisor silent for {durations.format(round(silent))} (threshold "
                   f"{durations.format(round(threshold))}): remediation is not running",
                   severity="critical", evidence={"last_tick_at": last, "silent_s": round(silent, 1)})

    # -- reaping --------------------------------------------------------------------
    def _handle(self, a: Agent) -> Handle:
        return Handle(kind=a.kind, pid=a.pid, container=a.container, marker=a.data.get("marker"))

    def reap(self, orphans: bool = True, workers: int = 1) -> list[str]:
        """Close the attempts of the agents that ended. `workers` > 1 closes them side by side (each costs a few git
        calls for HEAD and the state hash): the reaper thread does, so a burst of exits is not reaped one by one."""
        done, ended = [], []
        for a in self.store.agents(states=["running"]):
            if not ours(a) or a.host != self.host:
                continue
            st = self.runtime.status(self._handle(a))
            if st.state in (EXITED, GONE):
                ended.append((a, st.exit_code if st.state == EXITED else None))
                done.append(a.id)
        if workers > 1 and len(ended) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(workers, len(ended)), thread_name_prefix="reap") as pool:
                list(pool.map(lambda x: self._ended(*x), ended))
        else:
            for a, code in ended:
                self._ended(a, code)
        # agents someone else already recorded as lost (the supervisor's bookkeeping) still owe us their attempt
        for a in self.store.agents_to_reap(self.host):
            if ours(a) and a.host == self.host and a.data.get("reaped_by") and not a.data.get("stopped_here"):
                self._stop_reclaimed(a)
                continue
            if ours(a) and a.host == self.host and not a.data.get("reaped"):
                self._ended(a, a.exit_code, record_agent=False)
                done.append(a.id)
        if orphans:  # not from the reaper thread: a launch in flight would look like an orphan
            self._reconcile_orphans()
        return done

    def _stop_reclaimed(self, a: Agent) -> None:
        """This host was given up (lost, its lease expired) and its tickets requeued: an agent of it that still runs
        works for nobody now and must not race the ticket's new attempt in this worktree."""
        running = self.runtime.status(self._handle(a)).state == RUNNING
        if running:
            self.runtime.stop(self._handle(a), self.policy.loop.kill_grace)
        self.store.update_agent(a.id, data={**a.data, "stopped_here": True})
        self.store.append("dispatch.reclaimed_agent_stopped", a.ticket_id or a.id, {"agent": a.id, "was_running": running,
                                                                                     "reclaimed_by": a.data.get("reaped_by")})

    def _reconcile_orphans(self) -> None:
        """An in-progress ticket this dispatcher took but that has no live agent (a crash mid-launch) goes back to the queue."""
        live = {a.ticket_id for a in self.store.agents(states=["running"])}
        for t in self.store.tickets(states=[lifecycle.IN_PROGRESS]):
            if t.id in live:
                continue
            if self.shared and (t.data or {}).get("host", self.host) != self.host:
                continue  # another host's claim (its launch may be in flight): its dispatcher, or the supervisor once it is lost
            open_atts = [x for x in self.store.attempts(t.id) if x.ended_at is None]
            moves = [] if open_atts else self.store.events(kinds=["ticket.moved"], subject=t.id)
            if not fleet_rules.owns_orphan(False, len(open_atts), moves[-1].payload.get("actor") if moves else None):
                continue  # a human or another tool put it in progress: the supervisor's rules judge it
            if any(self._adopt(t, x) for x in open_atts):
                continue
            for x in open_atts:  # its dispatcher died mid-launch: the run never started, no budget counts it
                self.store.finish_attempt(x.id, failure_signature=f"{core.INTERRUPTED}: no agent registered "
                                                                  "(its dispatcher died mid-launch)")
            self._move(t.id, lifecycle.QUEUED, "in progress without a live agent", expect=lifecycle.IN_PROGRESS)

    def _adopt(self, t: Ticket, att: Attempt) -> bool:
        """A dispatcher killed between starting an agent and registering it left it running unseen:
        find it by the agent id in its environment and register it, rather than start a second one."""
        agent_id = agent_id_for(t.id, att.id)
        p = self.ports.processes.find_agent(self.root, agent_id, att.run_id)
        if p is None:
            return False
        now = self.clock.now()
        wt = worktree_for(self.root, t.id)
        self.store.upsert_agent(Agent(
            id=agent_id, ticket_id=t.id, state="running", kind="process", pid=p.pid, host=self.host,
            run_id=att.run_id, worktree=str(wt), started_at=now, heartbeat_at=now, progress_at=now,
            data={"launched_by": ACTOR, "attempt": att.id, "marker": p.marker, "launch": att.kind,
                  "log": str(self.root / ".healer" / "logs" / "agents" / f"{agent_id}.log"), "head": att.head,
                  "dispatcher": self.holder, "adopted": True, "process_started": p.started},
        ))
        self.store.append("dispatch.adopted", t.id, {"agent": agent_id, "pid": p.pid, "attempt": att.id})
        return True

    def _ended(self, a: Agent, code: int | None, record_agent: bool = True) -> None:
        res = _read_result(a.worktree, a.run_id)
        if code is None and res is not None and isinstance(res.get("exit_code"), int):
            code = res["exit_code"]
        head, state_hash = self.git.state(a.worktree) if a.worktree else (None, None)
        sig = (res or {}).get("failure_signature") or fleet_rules.signature(code)
        sig = core.interrupted_signature(code, stopped=a.state == "stopped",
                                         launcher_died=a.data.get("dispatcher") in self._crashed()) or sig
        if code == 0:
            sig = None
        log_tail = _log_tail(a.data.get("log"), self.policy.fleet.evidence_lines)
        tail = _tail_text((res or {}).get("gate_log_tail")) or log_tail
        ending = ending_of(code, res, log_tail, sig)
        if ending.infra and ending.cause != endings.HOST_EVENT:  # (an interrupted one keeps its own signature)
            sig = ending.signature()  # counted by no budget, seen by no escalation (healer/core/endings.py)
        now = self.clock.now()
        att_id = a.data.get("attempt")
        # one transaction: a dispatcher killed halfway leaves the agent unreaped (reaped again), never half-recorded
        with self.store.tx():
            if att_id is not None and any(x.id == att_id and x.ended_at is None for x in self.store.attempts(a.ticket_id)):
                self.store.finish_attempt(att_id, ended_at=now, exit_code=code, failure_signature=sig, state_hash=state_hash,
                                          head=head, gate_log_tail=tail)
                if ending.infra:
                    self.store.append("attempt.infra", a.ticket_id or a.id, {
                        "attempt": att_id, "agent": a.id, "cause": ending.cause, "exit_code": code,
                        "detail": " ".join(ending.detail.split())[:300]})
            if record_agent:
                self.store.update_agent(a.id, state=fleet_rules.agent_end_state(code), ended_at=now, exit_code=code)
            self.store.update_agent(a.id, data={**a.data, "reaped": True})
            self._close_ticket_of(a, code, head, sig)
        forget = getattr(self.runtime, "forget", None)
        if forget:
            forget(self._handle(a))

    def _crashed(self) -> set[str]:
        return set(self.store.get_setting(keys.DISPATCH_CRASHED) or [])

    def _close_ticket_of(self, a: Agent, code: int | None, head: str | None, sig: str | None) -> None:
        try:
            t = self.store.ticket(a.ticket_id)
        except Exception:  # noqa: BLE001 - the ticket was deleted by hand; the agent is closed anyway
            return
        if t.state != lifecycle.IN_PROGRESS:
            return  # someone else (a human, the supervisor) took the ticket elsewhere; respect it
        att_id = a.data.get("attempt")
        if att_id is not None and (atts := self.store.attempts(t.id)) and atts[-1].id != att_id:
            return  # a later attempt (requeued meanwhile, maybe on another host) owns the ticket now
        move = fleet_rules.exit_move(a.id, code, head, sig)
        if self._move(t.id, move.to, move.reason, expect=lifecycle.IN_PROGRESS) and move.propose:
            if self.shared and head and not shared_main.publish(a.worktree, branch_for(t.id), head, self.shared):
                self.store.append("dispatch.publish_failed", t.id, {"remote": self.shared, "commit": head})
            self.store.add_proposal(t.id, branch_for(t.id), head)

    # -- heartbeats -----------------------------------------------------------------
    def heartbeat(self) -> None:
        beats = []
        for a in self.store.agents(states=["running"]):
            if not ours(a) or a.host != self.host:
                continue
            if self.runtime.status(self._handle(a)).state != RUNNING:
                continue  # a SIGSTOPped (paused) agent gets no heartbeat: the supervisor must see it idle
            head = self.git.rev(a.worktree) if a.worktree and os.path.isdir(a.worktree) else None
            beats.append((a, head, head is not None and head != a.data.get("head")))
        # one write transaction for the whole fleet, taken after the runtime and git calls so it holds the lock briefly
        if beats:
            with self.store.tx():
                for a, head, moved in beats:
                    self.store.heartbeat(a.id, progress=moved)
                    if moved:
                        self.store.update_agent(a.id, data={**a.data, "head": head})

    # -- main's status --------------------------------------------------------------
    def check_main(self) -> str:
        fleet = self.policy.fleet
        prev = self.store.get_setting(keys.MAIN_STATUS, "unknown")
        head = self.git.rev(self.root, self._main_ref())
        checked = self.store.get_setting(keys.MAIN_CHECKED)
        if not fleet.main_gates:
            verdict, log = PASS, ""
        elif head == checked and prev == "green":
            return "green"  # gates already passed on this very commit
        elif head is None:
            verdict, log = "unknown", f"branch {fleet.main_branch} does not exist"
        else:
            res = self.ports.gates.main(self.root, self.policy, head, self.real)
            verdict, log = res.outcome, res.tail(self.policy.fleet.evidence_lines)
        status = fleet_rules.main_status(prev, verdict, bool(fleet.main_gates))
        if head != checked:  # red (gates run every pass) or no gates: the same commit is not written again
            self.store.set_setting(keys.MAIN_CHECKED, head)
        self.apply(fleet_rules.main_changed(
            prev, status, now=self.clock.now(), branch=fleet.main_branch, head=head, log=log,
            paused=bool(self.store.get_setting(keys.DISPATCH_PAUSED, False)),
            paused_reason=self.store.get_setting(keys.DISPATCH_PAUSED_REASON), red_since=self.store.get_setting(keys.MAIN_RED_SINCE),
            pause_on_red=fleet.pause_on_red_main))
        return status

    def apply(self, effects: list[fleet_rules.Effect]) -> None:
        """Carry out the core's effects, in order."""
        for e in effects:
            if e.op == "set":
                self.store.set_setting(e.key, e.value, event=e.event)
            elif e.op == "event":
                self.store.append(e.key, e.value, e.payload)
            elif e.op == "notify":
                from healer.notify import notify

                notify(self.store, self.policy, e.key, e.value, severity=e.severity, evidence=e.payload)

    def _main_ref(self) -> str:
        """Where main is: the local branch, or (shared repository) the shared main, fetched now."""
        main = self.policy.fleet.main_branch
        if not self.shared:
            return main
        try:
            shared_main.fetch(self.root, main, self.shared)
        except git.GitError as e:  # the shared repository is unreachable: work from what was fetched last
            self.store.append("dispatch.fetch_failed", "", {"remote": self.shared, "error": str(e)[-300:]})
        return shared_main.main_ref(main, self.shared)

    # -- proposals ------------------------------------------------------------------
    def review(self, rep: TickReport | None = None) -> None:
        reviewing = self.store.tickets(states=[lifecycle.REVIEW])
        if reviewing:
            self._stale_main_locks()
        for t in reviewing:
            props = self.store.proposals(t.id)
            last = props[-1] if props else None
            if last is None:
                head = self.git.rev(worktree_for(self.root, t.id)) or self.git.rev(self.root, f"refs/heads/{branch_for(t.id)}")
                if head is None:
                    self._move(t.id, lifecycle.QUEUED, "in review without a proposal or a branch", expect=lifecycle.REVIEW)
                    continue
                last = self.store.add_proposal(t.id, branch_for(t.id), head)
            if last.state == "merged":
                self._done(t, last, last.commit)
                continue
            if last.state != "open":
                continue
            wanted = lambda t=t, p=last: self._unwanted(t, p)  # noqa: E731
            v = (shared_main.gate_shared(self.root, self.policy, last, self.real, self.shared, still_wanted=wanted) if self.shared
                 else self.ports.gates.proposal(self.root, self.policy, last, self.real, still_wanted=wanted))
            if v.outcome == WITHHELD:
                self.store.decide_proposal(last.id, "rejected", v.log)
                self.store.append("proposal.withheld", t.id, {"proposal": last.id, "why": v.log.splitlines()[-1:]})
                continue
            if v.outcome == DEFERRED:
                self.store.append("proposal.deferred", t.id, {"proposal": last.id, "why": v.log.splitlines()[-1:] })
                continue
            # the proposal's verdict and, when merged, the ticket's merged_commit and its move to done in ONE store
            # transaction: a store lost between them (a PostgreSQL restart) left a review ticket whose work was on main
            # and whose proposal was no longer open, which the supervisor judged a zombie and closed (pg-restarts-real)
            with self.store.tx() if switches.enabled("merge_tx") else contextlib.nullcontext():
                self.store.decide_proposal(last.id, v.outcome, v.log)
                if v.conflict is not None:  # the reason in the event, not only in the proposal's log
                    c = v.conflict
                    self.store.append("proposal.conflict", t.id, {"proposal": last.id, "main": c.get("main"),
                                                                  "files": c.get("files"), "with": c.get("with")})
                if v.outcome == MERGED:
                    self._done(t, last, v.main_after)
            if v.outcome == MERGED:
                if rep:
                    rep.merged.append(t.id)
            elif rep:
                rep.rejected.append(t.id)

    def _unwanted(self, t: Ticket, p: Proposal) -> str | None:
        """Compare-and-set before main advances: the ticket must still be in review with this proposal open."""
        if not switches.enabled("move_cas"):  # a game day proving the compare-and-set can fail
            return None
        now = self.store.ticket(t.id)
        if now.state != lifecycle.REVIEW:
            return f"{t.id} moved to {now.state} while its merge gates ran"
        cur = next((x for x in self.store.proposals(t.id) if x.id == p.id), None)
        if cur is None or cur.state != "open":
            return f"proposal {p.id} is {cur.state if cur else 'gone'} now"
        return None

    def _done(self, t: Ticket, p: Proposal, merged_as: str | None) -> None:
        # the merged commit and the move to done together (inside review's transaction when the verdict is new): a
        # store lost between them left a review ticket whose work was on main, a zombie to the supervisor
        with self.store.tx() if switches.enabled("merge_tx") else contextlib.nullcontext():
            self.store.set_ticket_data(t.id, merged_commit=p.commit, merged_as=merged_as, proposal=p.id)
            failpoints.hit(FP_MERGE_RECORDED)
            self._move(t.id, lifecycle.DONE, f"proposal {p.id} merged", expect=lifecycle.REVIEW)

    # -- stops ----------------------------------------------------------------------
    def _stop(self, s: core.Stop) -> None:
        t = self.store.ticket(s.ticket_id)
        atts, props = budget_window(self.store, s.ticket_id)
        body = evidence(s, atts, props, self.policy.fleet.evidence_lines)
        if s.to == lifecycle.NEEDS_HUMAN:
            self.store.label(t.id, NEEDS_HUMAN_LABEL, actor=ACTOR)
        self.store.comment(t.id, body, author="healer")
        self._move(t.id, s.to, f"{s.reason}: {s.detail}", expect=t.state)
        why = rejections(props)
        self.store.append("dispatch.budget_exhausted" if s.to == lifecycle.NEEDS_HUMAN else "dispatch.blocked", t.id,
                          {"reason": s.reason, "detail": s.detail, "attempts": len(atts), "to": s.to,
                           **({"rejections": why} if why else {})})
        if s.to == lifecycle.NEEDS_HUMAN:
            from healer.notify import notify

            # the page carries what the comment says of the last run (its failure signature and state hash), so the
            # human it reaches (Alertmanager's annotations, a webhook) sees why without opening the board
            last = atts[-1] if atts else None
            notify(self.store, self.policy, f"needs_human:{t.id}", f"{t.id} needs a human: {s.detail}",
                   evidence={"ticket": t.id, "reason": s.reason, "attempts": len(atts),
                             "failure_signature": last.failure_signature if last else None,
                             "state_hash": last.state_hash if last else None, **({"rejections": why} if why else {})})

    # -- launches -------------------------------------------------------------------
    def _launch(self, launch: core.Launch) -> bool:
        t = self.store.ticket(launch.ticket_id)
        if t.state not in (lifecycle.QUEUED, lifecycle.REVIEW):
            return False
        wt = worktree_for(self.root, t.id)
        branch = branch_for(t.id)
        now = self.clock.now()
        run_id = launch.run_id if launch.kind == core.RESUME else f"{t.id}-{len(self.store.attempts(t.id)) + 1:02d}"
        att: Attempt | None = None
        if self.shared:  # several hosts: claim first (SKIP LOCKED), so a host that lost the race builds nothing
            claimed = self._claim(t, launch, wt)
            if claimed is None:
                return False
            att, run_id = claimed
        try:
            self.git.ensure_excluded(self.root)
            if not self._repair_worktree(t.id, wt):
                if att is not None:  # claimed: back to the queue, no budget spent (the next pass tries again)
                    self._unclaim(t, att, "its half-made worktree is still in use", endings.WORKTREE_BUSY)
                return False
            created = self.git.add_worktree(self.root, wt, branch, self._main_ref())
        except git.GitError as e:
            cause = endings.cause_of(str(e), type(e).__name__)  # a git lock, a full disk: the infrastructure's
            if att is not None:
                self._unclaim(t, att, f"worktree: {e}", cause)
            if host_trouble(e):
                raise  # a full disk is the host's failure, not the ticket's: the pass fails, the next one retries
            if att is None:
                self._failed_launch(t, launch, run_id, f"worktree: {e}", cause)
            return False
        if created or not any(w.path == str(wt) for w in self.store.worktrees()):
            self.store.add_worktree(Worktree(str(wt), t.id, branch, now))
        if not created:
            self._stale_index_lock(t.id, wt)
        task = self._task_file(t, launch, run_id)
        argv = self._argv(t, launch, run_id, task, wt)
        if att is None:
            if not self._move(t.id, lifecycle.IN_PROGRESS, launch.kind, expect=t.state):
                return False
            att = self.store.add_attempt(t.id, launch.kind, run_id=run_id, head=self.git.rev(wt))
        agent_id = agent_id_for(t.id, att.id)
        log = self.root / ".healer" / "logs" / "agents" / f"{agent_id}.log"
        env = {"HEALER_AGENT_ID": agent_id, "HEALER_ROOT": str(self.root), "HEALER_TICKET": t.id, "HEALER_RUN_ID": run_id,
               "HEALER_DB": str(self.root / ".healer" / "healer.db")}
        labels = {"healer.fleet": str(self.root), "healer.ticket": t.id, "healer.run": run_id}
        try:
            h = self.runtime.launch(LaunchSpec(argv=argv, cwd=str(wt), env=env, labels=labels, log_path=str(log)))
        except Exception as e:  # noqa: BLE001 - a launch that cannot start counts as a failed attempt
            sig = f"launch_failed: {type(e).__name__}"
            cause = endings.cause_of(str(e), type(e).__name__)
            if cause:  # the host's failure (a full disk): a fresh launch after retry.infra_backoff, counted by no budget
                sig = endings.Ending(endings.INFRA, cause, f"the host could not start it ({type(e).__name__}: {e})").signature()
                self.store.append("attempt.infra", t.id, {"attempt": att.id, "cause": cause, "exit_code": 70,
                                                          "detail": str(e)[:300]})
            self.store.finish_attempt(att.id, exit_code=70, failure_signature=sig, gate_log_tail=str(e))
            self._move(t.id, lifecycle.QUEUED, f"launch failed: {e}", expect=lifecycle.IN_PROGRESS)
            self.store.append("dispatch.launch_failed", t.id, {"error": str(e), "argv": list(argv)})
            return False
        try:
            self.store.upsert_agent(Agent(
                id=agent_id, ticket_id=t.id, state="running", kind=h.kind, pid=h.pid, host=self.host, container=h.container,
                run_id=run_id, worktree=str(wt), started_at=now, heartbeat_at=now, progress_at=now,
                data={"launched_by": ACTOR, "attempt": att.id, "marker": h.marker, "launch": launch.kind, "log": str(log),
                      "head": att.head, "argv": list(argv), "dispatcher": self.holder},
            ))
        except StaleLease:  # this host was given up while it launched: the ticket is another host's now
            self.runtime.stop(h, self.policy.loop.kill_grace)
            raise
        self.store.set_ticket_data(t.id, worktree=str(wt), branch=branch, run_id=run_id, agent=agent_id)
        failpoints.hit(FP_AFTER_LAUNCH)
        kind = {core.LAUNCH: "dispatch.launched", core.RESUME: "dispatch.resumed", core.REPLAY: "dispatch.replayed"}[launch.kind]
        self.store.append(kind, t.id, {"agent": agent_id, "pid": h.pid, "run_id": run_id, "attempt": att.id,
                                       "worktree": str(wt), "proposal": launch.proposal_id})
        self.store.set_setting(keys.DISPATCH_LAST_LAUNCH, now)
        return True

    def _claim(self, t: Ticket, launch: core.Launch, wt: Path) -> tuple[Attempt, str] | None:
        """Several hosts: take the ticket and open its attempt in one transaction, the claim skipping a ticket another
        host's claim holds (PostgreSQL: FOR UPDATE SKIP LOCKED); None when another host was first. The ticket records
        which host holds it, so no other host's dispatcher calls it an orphan, and the leading supervisor knows whose
        it is if this host is lost."""
        head = self.git.rev(wt) if wt.is_dir() else self.git.rev(self.root, self._main_ref())
        with self.store.tx():
            if t.state == lifecycle.QUEUED:
                if self.store.claim_ticket(actor=ACTOR, among=[t.id], reason=launch.kind) is None:
                    return None
            elif not self._move(t.id, lifecycle.IN_PROGRESS, launch.kind, expect=t.state):
                return None
            run_id = launch.run_id if launch.kind == core.RESUME else f"{t.id}-{len(self.store.attempts(t.id)) + 1:02d}"
            self.store.set_ticket_data(t.id, host=self.host)
            att = self.store.add_attempt(t.id, launch.kind, run_id=run_id, head=head, host=self.host)
        return att, run_id

    def _unclaim(self, t: Ticket, att: Attempt, why: str, cause: str | None) -> None:
        """A claimed ticket whose worktree could not be made goes back to the queue; the infrastructure's failure
        (`cause`: a full disk, a git lock, a busy folder) counts against no budget."""
        sig = endings.Ending(endings.INFRA, cause, f"the worktree could not be made: {why}").signature() if cause \
            else "launch_failed"
        with self.store.tx():
            self.store.finish_attempt(att.id, exit_code=70, failure_signature=sig, gate_log_tail=why)
            if cause:
                self.store.append("attempt.infra", t.id, {"attempt": att.id, "cause": cause, "exit_code": 70,
                                                          "detail": why[:300]})
            self._move(t.id, lifecycle.QUEUED, f"launch failed: {why}", expect=lifecycle.IN_PROGRESS)
        self.store.append("dispatch.launch_failed", t.id, {"error": why})

    def _repair_worktree(self, tid: str, wt: Path) -> bool:
        """A dispatcher killed during `git worktree add` leaves the ticket's worktree half-made: reused, its agent
        would work on a checkout without an index (and commit every file's deletion); recreated, git refuses
        the path for good. Nobody else creates it (we hold the fleet's lease): it is set aside (kept, never
        deleted), git's entry unlocked and pruned, and the launch goes on with a fresh checkout of the branch
        (its commits kept). False: something still works in the folder (a git child the kill missed), next pass."""
        why = self.git.half_made(self.root, wt)
        if why is None:
            return True
        if wt.exists() and any(self.ports.processes.busy([wt]).values()):
            self.store.append("dispatch.worktree_busy", tid, {"path": str(wt), "why": why})
            return False
        import uuid

        to = cv.set_aside_dir(self.root, "worktrees") / f"{wt.name}.{uuid.uuid4().hex[:8]}"
        self.store.append("dispatch.worktree_set_aside", tid, {"path": str(wt), "to": str(to), "why": why})
        self.git.set_aside(self.root, wt, to)
        return True

    def _stale_index_lock(self, tid: str, wt: Path) -> None:
        """An agent killed mid-commit leaves the worktree's index.lock behind, and every later run on the
        ticket would fail on it. Nobody else can hold it (no live agent on the ticket, nothing working in
        the worktree): it is renamed aside in git's own folder (kept, restorable), never deleted."""
        try:
            lock, = self.git.git_paths(wt, "index.lock")
        except git.GitError:
            return
        if not lock.exists():
            return
        from healer import procs

        if procs.busy_pids(wt):
            return
        aside = lock.with_name(f"index.lock.stale-{int(self.real.now())}")
        lock.rename(aside)
        self.store.append("dispatch.stale_lock_moved", tid, {"path": str(lock), "to": str(aside),
                                                             "why": "left by an agent killed mid-commit"})

    def _stale_main_locks(self) -> None:
        """A dispatcher killed mid-merge (a fast-forward of the checked-out main, a ref update) leaves git's lock
        files in the fleet root, and every later merge would be deferred on them for good. A lock no process
        has open is stale: renamed aside (kept, restorable), never deleted. A git command that runs holds its
        lock file open, so a human's git at work is never touched."""
        from healer import procs

        try:
            locks = self.git.git_paths(self.root, "index.lock", f"refs/heads/{self.policy.fleet.main_branch}.lock")
        except git.GitError:
            return
        for lock in locks:
            if not lock.exists() or procs.busy_pids(lock):
                continue
            aside = lock.with_name(f"{lock.name}.stale-{int(self.real.now())}")
            lock.rename(aside)
            self.store.append("dispatch.stale_lock_moved", "main", {"path": str(lock), "to": str(aside),
                                                                    "why": "left by a dispatcher killed mid-merge"})

    def _failed_launch(self, t: Ticket, launch: core.Launch, run_id: str, why: str, cause: str | None = None) -> None:
        att = self.store.add_attempt(t.id, launch.kind, run_id=run_id)
        sig = endings.Ending(endings.INFRA, cause, why).signature() if cause else "launch_failed"
        self.store.finish_attempt(att.id, exit_code=70, failure_signature=sig, gate_log_tail=why)
        if cause:
            self.store.append("attempt.infra", t.id, {"attempt": att.id, "cause": cause, "exit_code": 70, "detail": why[:300]})
        self.store.append("dispatch.launch_failed", t.id, {"error": why})

    def _task_file(self, t: Ticket, launch: core.Launch, run_id: str) -> Path:
        text = _subst(self.policy.fleet.task_template, {"ticket": t.id, "title": t.title, "body": t.body})
        if launch.kind == core.REPLAY and launch.proposal_id is not None:
            p = next((p for p in self.store.proposals(t.id) if p.id == launch.proposal_id), None)
            if p is not None:
                tail = "\n".join(p.gate_log.splitlines()[-self.policy.loop.memory.gate_log_lines:])
                text += (f"\n## Your previous proposal was rejected\n\nThe merge gates failed on the merge of "
                         f"{p.branch} ({p.commit[:12]}) onto {self.policy.fleet.main_branch}:\n\n```\n{tail}\n```\n")
        path = self.root / ".healer" / "tasks" / f"{run_id}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def _policy_file(self) -> Path:
        if self.policy_path is not None:
            return self.policy_path
        path = self.root / ".healer" / "policy.effective.yaml"
        text = yaml.safe_dump(self.policy.model_dump(mode="json", by_alias=True), sort_keys=False)
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, text)  # a loop starting now reads the old policy or the new one, never half of one
        return path

    def _argv(self, t: Ticket, launch: core.Launch, run_id: str, task: Path, wt: Path) -> list[str]:
        fleet = self.policy.fleet
        values = dict(python=sys.executable, policy=str(self._policy_file()), task_file=str(task), workdir=str(wt),
                      root=str(self.root), run_id=run_id, ticket=t.id)
        argv = [_subst(a, values) for a in fleet.loop_command]
        if launch.kind == core.RESUME:
            argv += [_subst(a, values) for a in fleet.resume_args]
        return argv

    # -- helpers --------------------------------------------------------------------
    def _move(self, tid: str, to: str, reason: str, expect: str | None = None) -> bool:
        """Compare-and-set move; a ticket someone else moved meanwhile is left alone (and the refusal logged)."""
        if expect is not None and not switches.enabled("move_cas"):  # a game day proving the compare-and-set can fail
            expect = None
        try:
            self.store.move_ticket(tid, to, actor=ACTOR, reason=reason, expect=expect)
            return True
        except lifecycle.InvalidTransition as e:
            self.store.append("dispatch.move_refused", tid, {"to": to, "reason": reason, "error": str(e)})
            return False

    def _note_cycles(self, plan: core.DispatchPlan) -> None:
        now = [list(c) for c in plan.cycles]
        if now != (self.store.get_setting(keys.DISPATCH_CYCLES) or []):
            self.store.set_setting(keys.DISPATCH_CYCLES, now)
            if now:
                self.store.append("dispatch.cycle", "", {"cycles": now, "line": plan.cycle_line()})

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
                self.runtime.stop(self._handle(a), grace)

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

    def run_forever(self, on_tick=None) -> None:
        """Tick every `fleet.dispatch_tick` (schedule), and at once when an agent we launched exits (the runtime's
        exit watch wakes us), until `stop()`; agents keep running when the dispatcher ends."""
        import schedule

        sched = schedule.Scheduler()
        period = max(1, int(round(self.policy.fleet.dispatch_tick)))

        def job() -> None:
            rep = self.pass_once()
            if on_tick and rep is not None:
                on_tick(rep)

        sched.every(period).seconds.do(job)
        job()
        real = isinstance(self.clock, SystemClock)
        reaper = threading.Thread(target=self._reaper, name="reaper", daemon=True) if real else None
        if reaper is not None:
            reaper.start()
        if real and getattr(self.store, "url", None):  # a shared board (PostgreSQL): work queued on any host wakes us
            threading.Thread(target=self._board_watch, name="board-watch", daemon=True).start()
        try:
            while not self._stopping:
                if self._reaped.is_set() and not self._stopping:  # a slot was freed: launch into it, gate the proposal
                    self._reaped.clear()
                    job()
                sched.run_pending()
                idle = sched.idle_seconds
                pause = min(0.5, max(0.05, idle if idle is not None else 0.5))
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
        from healer.errors import StoreLost, transient
        from healer.store import outage

        try:
            self.store.check()
            rep = self.tick()
            outage.ok(self.store, who="dispatch")
            return rep
        except (failpoints.FailpointError, StoreLost):
            raise
        except Exception as e:  # noqa: BLE001 - judged below; the daemon goes on
            from healer.store.corrupt import raise_if_corrupt

            raise_if_corrupt(self.store, e)  # damaged pages do not heal by retrying: one line, exit 74
            if outage.unavailable(e) and not host_trouble_or_corrupt(e):
                outage.failed(self.store, e, tried=False)  # one line per outage, not per pass; StoreGone past the tolerance
                return None
            if not transient(e) and "readonly" in str(e):
                raise StoreLost(f"{self.store.path}: the store is read-only now ({e}); stopping") from e
            raise_if_lost(self.store)
            report_failed_pass(self.store, "dispatch", e)
            return None

    def _board_watch(self) -> None:
        """LISTEN on the board from a connection of its own: a ticket added or requeued by another host (or a human)
        wakes the loop at once instead of at the next tick."""
        from healer.errors import StoreUnavailable
        from healer.store import open_url

        watcher = None
        while watcher is None and not self._stopping:
            try:
                watcher = open_url(self.store.url, migrate=False)
            except StoreUnavailable:  # the database is restarting: the passes ride it out, the watch waits for it
                self.clock.sleep(1.0)
            except Exception as e:  # noqa: BLE001 - the tick still runs; waking early is an optimisation
                from loguru import logger

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
            from loguru import logger

            logger.warning("board watch stopped: {}", e)
        finally:
            watcher.close()

    def _renew_host(self) -> None:
        """Several hosts: renew this host's lease every second, not only at each pass (a pass that merges and
        gates for longer than fleet.host_ttl must not get a healthy host given up). Only a lease we hold is renewed:
        one the supervisor fenced is taken back by the next pass, which fences the writes with the new token."""
        from healer.store.sqlite import pid_alive

        try:
            name = hosts.lease_name(self.host)
            cur = self.store.lease(name)
            if cur is not None and cur.holder == self.holder:
                self.store.acquire_lease(name, self.holder, self.pid, self.host, self.policy.fleet.host_ttl,
                                         pid_alive=pid_alive)
        except Exception:  # noqa: BLE001 - the pass renews it too; a store outage is the pass's to report
            pass

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
                    done = self.reap(orphans=False, workers=4)
            except Exception as e:  # noqa: BLE001 - the next tick reaps what this pass could not
                report_failed_pass(self.store, "reaper", e)
                continue
            if done:
                self._reaped.set()


def ending_of(code: int | None, res: dict | None, log_tail: str, sig: str | None) -> endings.Ending:
    """How a reaped agent's attempt ended (healer/core/endings.py): with a result file, the runner's own `cause`
    says it; without one (it could not write it, or never got that far), its last `healer:` line does."""
    if sig and sig.startswith(core.INTERRUPTED):
        return endings.classify(code, text=sig, interrupted=True)
    if res is not None:
        reason = str(res.get("reason") or "")
        cause = res.get("cause")
        e = endings.classify(code, cause=cause if isinstance(cause, str) else None)
        return endings.Ending(e.kind, e.cause, reason) if e.infra else e
    return endings.classify(code, text=endings.runner_words(None, log_tail))


def raise_if_lost(store) -> None:
    """StoreLost when the store was deleted, replaced or made read-only during a pass that failed: that
    explains the failure, and the daemon ends with its one line instead of first logging a failed pass
    (into log files that may have gone with the store's folder). Any other answer lets the pass be reported."""
    from healer.errors import StoreLost

    try:
        store.check()
    except StoreLost:
        raise
    except Exception:  # noqa: BLE001 - the store could not say: the failed pass is reported as before
        pass


def host_trouble_or_corrupt(e: BaseException) -> bool:
    """A full disk (its own line and finding) or a damaged store (the daemon ends) is not an outage to ride out."""
    from healer.errors import host_trouble
    from healer.store.corrupt import corrupt

    return host_trouble(e) or corrupt(e)


def report_failed_pass(store, who: str, e: BaseException) -> None:
    """One line on stderr and, if the store takes it, one `<who>.error` event; never raises. The store being
    away (healer/store/outage.py) is noted instead: one line per outage, not one per failed pass."""
    from loguru import logger

    from healer.store import outage

    if outage.unavailable(e) and not host_trouble_or_corrupt(e):
        outage.note(store, e, tried=False)
        return

    line = f"{who} pass failed ({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else '-'}); retrying next pass"
    try:
        logger.error(line)
    except Exception:  # noqa: BLE001 - logging must not end the daemon either
        pass
    try:
        store.append(f"{who}.error", who, {"error": f"{type(e).__name__}: {e}"[:2000]})
    except Exception:  # noqa: BLE001 - a full disk refuses the event too; the line above told the story
        pass


def install_signal_handlers(d: Dispatcher) -> None:
    signal.signal(signal.SIGTERM, d.stop)
    signal.signal(signal.SIGINT, d.stop)


# -- evidence ----------------------------------------------------------------------

def _exit_text(a: Attempt) -> str:
    if a.ended_at is None:
        return "running"
    if a.exit_code is None:
        return "lost"
    if a.exit_code < 0:
        return f"killed({fleet_rules.signature(a.exit_code).split(': ')[-1]})"
    return str(a.exit_code)


def rejections(props: list[Proposal]) -> list[str]:
    """`#3 merge: conflict with main in a.py (…)` for each proposal rejected for a merge conflict."""
    return [f"#{p.id} {r}" for p in props if p.state == "rejected" and (r := rejection_reason(p.gate_log or ""))]


def evidence(s: core.Stop, atts: list[Attempt], props: list[Proposal], lines: int) -> str:
    head = {"launch_budget": "launch budget exhausted", "spinning": "resumed agent is spinning",
            "replays_exhausted": "rejected proposal replays exhausted"}.get(s.reason, s.reason)
    why = rejections(props)  # a merge conflict is the reason, whatever the last gate log (often green) says
    out = [f"healer: {head} — {s.detail}. Ticket moved to {s.to}.", *[f"Why: proposal {w}" for w in why[-3:]], "",
           f"Attempts ({len(atts)}):"]
    for i, a in enumerate(atts, 1):
        out.append(f"{i}. {iso(a.at)} {a.kind} run={a.run_id} exit={_exit_text(a)} "
                   f"signature={a.failure_signature or '-'} state={a.state_hash or '-'} head={(a.head or '-')[:12]}")
    rejected = [p for p in props if p.state == "rejected"]
    if rejected:
        out += ["", f"Rejected proposals ({len(rejected)}):"]
        out += [f"- #{p.id} {p.commit[:12]} at {iso(p.decided_at or p.created_at)}"
                + (f": {r}" if (r := rejection_reason(p.gate_log or "")) else "") for p in rejected]
    log = rejected[-1].gate_log if s.reason == "replays_exhausted" and rejected else \
        next((a.gate_log_tail for a in reversed(atts) if a.gate_log_tail), "")
    tail = log.splitlines()[-lines:]
    out += ["", f"Last {len(tail)} gate-log lines:", "```", *tail, "```"]
    return "\n".join(out)


_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def _subst(text: str, values: dict[str, str]) -> str:
    """Replace the known {placeholders} only; any other brace (a `python -c` snippet, JSON) stays as written."""
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), text)


def _tail_text(v: Any) -> str:
    if isinstance(v, list):
        return "\n".join(str(x) for x in v)
    return str(v) if v else ""


def _log_tail(path: str | None, n: int) -> str:
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-n:])
