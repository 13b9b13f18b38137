"""The simulated engine: the real core and store on a VirtualClock, agents as virtual processes.

What is real: the SQLite store (in a temp folder), the event log, `healer.core.decide`
(the supervisor's findings, plan, alerts, repair trigger), `healer.core.dispatch.decide`
(budgets, backoff, spinning, replays, red main), `healer.notify.notify` (cooldowns),
ticket transitions through the lifecycle table, the intent journal.
and the REAL remediation executor (`healer.remedy.actions.execute` and `recover`), which
talks to the virtual processes through `SimRuntime` (the Runtime port).
What is simulated: agent processes (a behaviour from chaos/agents/behaviours.py decides
how long each run takes and how it ends; a run that commits commits in its worktree), main's colour, and
the ports the real Dispatcher and Supervisor run over (chaos/engine/sim_ports.py: runtime, gates, process
table, repair launcher; chaos/engine/simgit.py: git, over a repository model with git's semantics whose
checkouts and lock files are on disk).

Everything is driven by a heap of timed steps; the only randomness comes from
`random.Random(seed)`, so a run is a pure function of (scenario, seed).
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from chaos.agents.behaviours import Behaviour, make
from chaos.checkers import STANDARD, History
from chaos.engine.arming import FailpointArming
from chaos.engine.base import Activity, Result, apply_fault, finish
from chaos.engine.sim_adopt import SimAdopt
from chaos.engine.sim_ports import Proc, SimDisk, SimGates, SimLauncher, SimProcesses, SimRuntime
from chaos.engine.simgit import SimGit, SimRepo
from chaos.engine.simstore import CachedStore
from chaos.faults.schedule import resolve
from chaos.faults.undo import UndoJournal, home
from chaos.faults.worlds import SIM, inject, undo
from chaos.invariants import policy_facts
from chaos.scenario import Scenario, deep_merge, match
from chaos.scenario_parts import Fault, TicketSpec
from chaos.workdir import fresh
from healer import conventions as cv
from healer import failpoints, lifecycle, procs
from healer import quarantine as qmod
from healer.clock import Clock, VirtualClock, system
from healer.errors import HealerError
from healer.fleet.dispatcher import Dispatcher
from healer.fleet.ports import Ports
from healer.fleet.snapshot import HOST
from healer.git import GitError
from healer.records import Agent, Worktree
from healer.store import db_path
from healer.supervisor import Supervisor

RED = b"main is broken on purpose (game day)\n"  # what real mode's red_main commits (chaos/faults/repo.py)
START = 1_700_000_000.0  # a fixed epoch start: a run is reproducible to the second
PAUSED_KEY = cv.DISPATCH_PAUSED
MAIN_STATUS = cv.MAIN_STATUS
PID_BASE = 50_000_000  # virtual pids: above any Linux pid_max, so never a real process
SIM_HOST = "simulated-supervisor-host"  # the supervisor's lease host: its holder pids are virtual too
ITERATION = 300.0  # a virtual governed loop heart-beats once per iteration (5 min)
T = TypeVar("T")
SIM_NOTIFIERS = {"notify": {"notifiers": [{"kind": "jsonl", "path": ".healer/notifications.jsonl"}]}}


class Hooks:
    """Around each step of the product (`dispatch`, `supervise`) and of the world's own bookkeeping (`launch`, `kill`
    a virtual agent): the port a world built on this one (the restart storm, chaos/engine/simstorm.py) arms or
    disarms failpoints through. By default the step just runs."""

    def around(self, kind: str, fn: Callable[..., T], *args: Any) -> T:
        return fn(*args)


class SimEngine:
    def __init__(self, scenario: Scenario, workdir: Path, *, seed: int | None = None, disabled: bool = False,
                 overrides: dict | None = None, progress=None, wall: Clock | None = None) -> None:
        self.sc = scenario
        self.seed = scenario.seed if seed is None else seed
        self.disabled = disabled
        self.policy = scenario.effective_policy(deep_merge(SIM_NOTIFIERS, overrides or {}), disabled)
        self.wall = wall or system()
        self.progress = progress
        self.rng = random.Random(self.seed)
        self.clock = VirtualClock(START)
        self.offset = 0.0  # wall-clock jumps (clock_jump fault)
        self.root = Path(workdir) / "fleet"
        self.trash = Path(workdir) / "trash"  # where a vanished worktree goes (delete_worktree): kept, as in real mode
        self.run_id = f"{scenario.name}-{self.seed}"
        fresh(self.root)
        (self.root / ".healer").mkdir(parents=True)
        self.repo = SimRepo(self.root, self.policy.fleet.main_branch)  # the fleet's git (chaos/engine/simgit.py)
        self.git = SimGit(self.repo)
        self.store = self._open_store()
        self.pid_n = 0
        self.heap: list[tuple[float, int, str, tuple]] = []
        self.seq = itertools.count()
        self.procs: dict[str, Proc] = {}
        self.by_pid: dict[int, Proc] = {}
        self.runtime = SimRuntime(self)
        self.injected: dict[str, str] = {}  # files a fault wrote: user files the healer must keep (or quarantine)
        self.busy_procs: list = []
        self.undo = UndoJournal(home() / f"{scenario.name}-{Path(workdir).name}-{id(self)}")
        self.world_v = 0
        self._view: dict[str, Any] | None = None
        self._view_key: dict[str, int] | None = None
        self._cuts: dict[str, float] = {}
        self._cuts_seen = 0
        self.behaviours: dict[str, Behaviour] = {}
        self.runs: dict[str, int] = {}
        self.broken: set[str] = set()
        self.broken_since: dict[str, float] = {}  # a merge before the fault was of good work
        self.main = scenario.fleet.main
        self.main_red_since: float | None = START if self.main == "red" else None
        self.frozen = False
        self.supervisor_up = True
        self.standby = None  # fleet.standby_supervisor: a second supervisor, on another host
        self.supervisor_paused = False
        self.dispatcher_up = True
        self.dispatcher_paused = False
        self.dispatcher_pid: int | None = None  # the dispatcher's holder pid (a restart storm numbers its incarnations)
        self.dispatcher_host = HOST  # its host id: kill_dispatcher's params.host restarts it under another (issue 40)
        self.next_dispatcher_host: str | None = None
        self.hooks = Hooks()
        self.holder_n = 1
        self.repair_n = 0
        self.activities: list[Activity] = []
        self.rollbacks: list[Activity] = []
        self.ticks = 0
        self.n_agents = 0
        self.last_event_id = 0
        self.event_faults = [f for f in scenario.faults if f.on_event]
        self.fp_queue: list[tuple[str, str, int]] = []
        if any(f.fault == "failpoint" for f in scenario.faults):
            failpoints.load_all()  # imports every module to learn every name: only when a glob needs matching
        for f in scenario.faults:
            if f.fault == "failpoint" and f.failpoint:
                for d in failpoints.registry():
                    if match(f.failpoint, d.name):
                        self.fp_queue.append((d.name, "raise", f.hit))
        self.fired: set[int] = set()
        self.tick = scenario.tick or self.policy.supervisor.tick
        self.dispatch_tick = self.policy.fleet.dispatch_tick
        self.disk = SimDisk()  # the disk-free port: the disk_full / disk_freed faults set what it answers
        self.ports = Ports(self.git, SimGates(self), SimProcesses(self), SimLauncher(self), self.disk)
        if self.main == "red":
            self.repo.commit(self.root, {"RED": RED}, "game day: break main")
        self.adopt = SimAdopt(self)  # loops healer did not launch: the adoption's process table is its port

    def _open_store(self):
        store = CachedStore(db_path(self.root), self.clock, root=self.root.resolve())
        store.no_fsync()
        return store

    # -- time -------------------------------------------------------------------
    @property
    def now(self) -> float:
        return self.clock.now()

    def at(self, t: float, what: str, *args: Any) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), what, args))

    @property
    def main_commit(self) -> str:
        head = self.repo.resolve(f"refs/heads/{self.policy.fleet.main_branch}")
        assert head is not None  # the world's main branch is never deleted
        return head

    def set_main(self, colour: str) -> None:
        """Main's gates turn `colour` (red_main / green_main): a commit on main that adds (removes) `RED`, as real
        mode's fault commits it (chaos/faults/repo.py set_main), and since when it is red."""
        red = self.repo.checkout(self.root)
        has = red is not None and "RED" in red.index
        if colour == "red" and not has:
            self.repo.commit(self.root, {"RED": RED}, "game day: break main")
        elif colour != "red" and has:
            self.repo.commit(self.root, {}, "game day: fix main", remove=("RED",))
        else:  # the same tree again (`commit --allow-empty`): a new head all the same, whose gates give `colour`
            self.repo.commit(self.root, {}, f"game day: {colour} main")
        self.main = colour
        self.main_red_since = self.now if colour == "red" else None

    def sim_now(self) -> float:
        return self.clock.now() - self.offset - START

    # -- setup ------------------------------------------------------------------
    def setup(self) -> None:
        for rel, text in self.sc.fleet.files.items():
            p = self.root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        specs = list(self.sc.fleet.tickets)
        for i in range(self.sc.fleet.random_tickets):
            specs.append(TicketSpec(id=f"R-{i + 1}", behaviour="random", priority=self.rng.randint(1, 3)))
        for spec in specs:
            ids = spec.ids()
            for k, tid in enumerate(ids):
                blocked = list(spec.blocked_by)
                if spec.cycle and len(ids) > 1:
                    blocked.append(ids[(k + 1) % len(ids)])
                created = START - spec.age
                self.clock.set(START)
                self.store.add_ticket(spec.title, id=tid, priority=spec.priority, blocked_by=blocked, actor="gameday",
                                          state=spec.state, data={"behaviour": spec.behaviour})
                self.behaviours[tid] = make(spec.behaviour, spec.params)
                self.runs[tid] = 0
                self._backdate(tid, created, spec.labels)
                if spec.merged:
                    self.store.set_ticket_data(tid, merged_commit=self.main_commit)
                if spec.state == lifecycle.IN_PROGRESS:
                    wt = None
                    if spec.worktree:
                        wt = self.add_worktree(tid, created)
                    elif spec.agent != "none":  # its agent worked in a worktree that is no longer on disk
                        wt = str(cv.worktree_for(self.root, tid))
                    if spec.agent != "none":
                        self.n_agents += 1
                        aid = f"a-{self.n_agents}"
                        # started before this dispatcher (another shell, a crashed host): not ours to reap
                        self.pid_n += 1
                        self.store.upsert_agent(Agent(aid, tid, "running", pid=PID_BASE + self.pid_n, host=HOST,
                                                      run_id=f"run-{tid}-0", worktree=wt, started_at=created,
                                                      heartbeat_at=created, progress_at=created,
                                                      data={"launched_by": "legacy"}))
                        if spec.agent == "live":
                            self._spawn(aid, tid, PID_BASE + self.pid_n)
                    self.runs[tid] = 1
                if spec.state == lifecycle.REVIEW and spec.worktree:  # its work: a branch with a commit
                    self.repo.commit(self.add_worktree(tid, created), {f"work/{tid}.txt": f"{tid}: the work under review\n".encode()},
                                     f"{tid}: work")
        self.store.set_setting(MAIN_STATUS, "unknown")
        self.policy_file = self.root / ".healer" / "policy.gameday.yaml"
        self.policy_file.write_text(yaml.safe_dump(self.policy.model_dump(mode="json", by_alias=True), sort_keys=False))
        self.dispatcher = self._new_dispatcher()
        self.supervisor = self._new_supervisor()
        # a standby on another host: it cannot judge the leader's pid, so it waits for the lease to expire
        self.standby = self._new_supervisor(standby=True) if self.sc.fleet.standby_supervisor else None

    def add_ticket(self, tid: str, behaviour: str = "succeeds", params: dict | None = None, priority: int = 2) -> None:
        """A ticket filed mid-run (a human, or a stateful test): queued now, seen by the next dispatch."""
        self.store.add_ticket("scenario ticket", id=tid, priority=priority, actor="gameday", data={"behaviour": behaviour})
        self.behaviours[tid] = make(behaviour, params)
        self.runs[tid] = 0
        self.at(self.sim_now(), "dispatch")

    def _backdate(self, tid: str, created: float, labels: dict[str, float]) -> None:
        # scenarios start mid-story: tickets created (and labels added) in the past
        self.store.backdate_ticket(tid, created, actor="gameday")
        for label, age in labels.items():
            self.store.label(tid, label, actor="gameday", at=START - age)

    def add_worktree(self, tid: str, created: float | None = None) -> str:
        path = str(cv.worktree_for(self.root, tid))
        existing = [w for w in self.store.worktrees() if w.path == path]
        if not existing:
            self.git.add_worktree(self.root, path, cv.branch_for(tid), self.policy.fleet.main_branch)
            self.store.add_worktree(Worktree(path, tid, cv.branch_for(tid), created if created is not None else self.now))
        return path

    # -- processes ----------------------------------------------------------------
    def _spawn(self, aid: str, tid: str, pid: int) -> Proc:
        n = self.runs.get(tid, 0)
        run = self.behaviours[tid].plan(n, self.rng)
        p = Proc(aid, tid, run, self.now, pid=pid)
        self.procs[aid] = p
        self.by_pid[p.pid] = p
        self.store.append("chaos.proc.started", aid, {"ticket": tid, "outcome": run.outcome})
        if run.outcome != "hang":
            self.at(self.sim_now() + run.duration, "proc_end", aid, p.gen)
        self.at(self.sim_now() + ITERATION, "beat", aid, p.gen)
        return p

    def launch(self, spec) -> int:
        return self.hooks.around("launch", self._launch, spec)

    def _launch(self, spec) -> int:
        """A process the dispatcher started (SimRuntime.launch): the ticket's behaviour decides its run."""
        tid, aid = spec.labels.get("healer.ticket"), spec.env.get("HEALER_AGENT_ID")
        if tid not in self.behaviours:
            raise HealerError(f"no behaviour for ticket {tid!r}")
        refuse = getattr(self.behaviours[tid], "refuse", None)  # an agent that cannot even start (cannot_start)
        if refuse is not None:
            tries = self.runs.get(f"starts:{tid}", 0)
            self.runs[f"starts:{tid}"] = tries + 1
            if (err := refuse(tries)) is not None:
                raise err
        self.pid_n += 1
        self.n_agents += 1
        p = self._spawn(aid, tid, PID_BASE + self.pid_n)
        p.worktree, p.run_id = spec.cwd, spec.labels.get("healer.run")
        self.runs[tid] = self.runs.get(tid, 0) + 1
        return p.pid

    def _proc_end(self, aid: str, gen: int) -> None:
        p = self.procs.get(aid)
        if p is None or not p.alive or p.gen != gen:
            return
        if p.paused:
            p.ended_early = True
            return
        p.alive = False
        self.world_v += 1
        tid = p.ticket
        if p.run.commit and p.worktree:
            n = self.runs.get(tid, 0)
            try:  # the agent's work, committed in its worktree (not when it vanished, or when its index is locked)
                self.repo.commit(p.worktree, {f"work/{tid}.txt": f"{tid}: run {n}\n".encode()}, f"{tid}: run {n}")
            except GitError as e:
                self.store.append("chaos.commit_failed", aid, {"ticket": tid, "error": str(e)})
        if p.run.outcome == "infra":  # the runner's own end for a service that was away: 69 and its cause
            p.exit_code = 69
            if p.worktree and p.run_id and Path(p.worktree).is_dir():
                res = cv.result_path(p.worktree, p.run_id)
                res.parent.mkdir(parents=True, exist_ok=True)
                res.write_text(json.dumps({"run_id": p.run_id, "exit_code": 69, "cause": p.run.cause,
                                           "reason": "a service the run needed was away (simulated)"}))
        elif p.run.outcome != "die":
            p.exit_code = 0 if p.run.outcome in ("success", "broken", "noop") else 1
            if p.exit_code and p.run.signature and p.worktree and p.run_id and Path(p.worktree).is_dir():
                # what the governed loop leaves for the dispatcher: its own failure signature
                res = cv.result_path(p.worktree, p.run_id)
                res.parent.mkdir(parents=True, exist_ok=True)
                res.write_text(json.dumps({"run_id": p.run_id, "exit_code": p.exit_code,
                                           "failure_signature": p.run.signature}))
        self.store.append("chaos.proc.ended", aid, {"ticket": tid, "outcome": p.run.outcome})
        self.at(self.sim_now(), "dispatch")

    def kill_agent(self, aid: str) -> bool:
        return self.hooks.around("kill", self._kill_agent, aid)

    def _kill_agent(self, aid: str) -> bool:
        p = self.procs.get(aid)
        if p is None or not p.alive:
            return False
        p.alive = False
        p.paused = False
        p.exit_code = None
        self.world_v += 1
        self.store.append("chaos.proc.ended", aid, {"ticket": p.ticket, "outcome": "killed"})
        return True

    def _ticket(self, tid: str):
        try:
            return self.store.ticket(tid)
        except Exception:  # noqa: BLE001 - a missing ticket is simply not there
            return None

    # -- the product: the real Dispatcher and Supervisor over this world's ports -----------
    def _dispatch(self) -> None:
        self.hooks.around("dispatch", self._dispatch_pass)

    def _dispatch_pass(self) -> None:
        if not self.dispatcher_up or self.dispatcher_paused:
            return
        # frozen: the field incident's dispatcher is alive and passing, it just launches nothing (its launch
        # loop sees a stop request), so the sentinel that must fire is dispatch_frozen, not a dead dispatcher
        self.dispatcher.stopping = self.frozen
        self.dispatcher.pass_once()  # the daemon's own pass: a failed one is journaled, as it is on a host

    def _beat(self, aid: str, gen: int) -> None:
        """The governed loop inside a virtual process: one iteration, one heartbeat (progress unless it hangs)."""
        p = self.procs.get(aid)
        if p is None or not p.alive or p.gen != gen:
            return
        self.at(self.sim_now() + ITERATION, "beat", aid, gen)
        if p.paused:
            return
        beating = p.run.heartbeats or self.now < p.started + p.run.duration
        if beating:
            self.store.heartbeat(aid, progress=p.run.outcome != "hang")

    def _supervise(self) -> None:
        self.hooks.around("supervise", self._supervise_pass)

    def _supervise_pass(self) -> None:
        self.at(self.sim_now() + self.tick, "supervise")
        if self.supervisor_up and not self.supervisor_paused:
            rep, _ = self.supervisor.tick_once()  # the daemon's own tick: a failed one is journaled, as on a host
            if rep is not None and rep.skipped is None:
                self.ticks += 1
        if self.standby is not None:
            rep, _ = self.standby.tick_once()
            if rep is not None and rep.skipped is None:
                self.ticks += 1

    def _new_dispatcher(self, pid: int | None = None):
        return Dispatcher(self.root, self.policy, self.store, self.clock, self.runtime, policy_path=self.policy_file,
                          ports=self.ports, host=self.dispatcher_host, pid=self.dispatcher_pid if pid is None else pid)

    def _new_supervisor(self, standby: bool = False):
        # a virtual pid (never a live process) on a host of its own: a crashed holder's lease is taken over
        # as the product does it, deterministically
        if standby:
            return Supervisor(self.root, self.policy, self.store, self.clock, self.runtime, holder="sim-supervisor-standby",
                              ports=self.ports, host=HOST, lease_host=f"{SIM_HOST}-standby", pid=PID_BASE - 1000,
                              proctable=self.adopt.table)
        return Supervisor(self.root, self.policy, self.store, self.clock, self.runtime, holder=f"sim-supervisor-{self.holder_n}",
                          ports=self.ports, host=HOST, lease_host=SIM_HOST, pid=PID_BASE - self.holder_n,
                          proctable=self.adopt.table)

    # -- faults -----------------------------------------------------------------------
    def _fault(self, f: Fault) -> None:
        self.world_v += 1
        t0 = self.wall.now()
        status, out, kind = apply_fault(self.inject, f)
        self.store.append(kind, f.target or f.fault, {"fault": f.fault, "target": f.target, "result": out,
                                                      **({} if status == "succeeded" else {"status": status})})
        self.activities.append(Activity(f"fault {f.fault}" + (f" on {f.target}" if f.target else ""), "action", t0,
                                        self.wall.now(), status, out))

    def inject(self, f: Fault) -> str:
        return inject(SIM, self, f)

    def meanwhile(self, kind: str, subject: str) -> None:
        """Mid-step (e.g. while a merge gate runs): faults chained on `kind` fire now, inside the product's step."""
        if any(f.on_event == kind for f in self.event_faults):
            self.store.append(kind, subject, {})
            self._event_faults()

    def _event_faults(self) -> None:
        if not self.event_faults:
            return
        kinds = sorted({f.on_event for f in self.event_faults})
        evs = self.store.events(after=self.last_event_id, kinds=kinds)
        self.last_event_id = self.store.last_event_id()
        for e in evs:
            for i, f in enumerate(self.event_faults):
                if i in self.fired or e.kind != f.on_event or not match(f.subject, e.subject):
                    continue
                key = f"nth:{i}"
                n = self.runs.get(key, 0) + 1
                self.runs[key] = n
                if n == f.nth:
                    self.fired.add(i)
                    self._fault(f)

    # -- run --------------------------------------------------------------------------
    def _arm_failpoint(self) -> None:
        name, action, hit = self.fp_queue[0] if self.fp_queue else (None, None, None)
        self.arming.set(f"{name}={action}@{hit}" if name else None, reset=True)

    def step(self, what: str, args: tuple) -> None:
        if what == "supervise":
            try:
                self._supervise()
            except failpoints.FailpointError as e:
                # the supervisor died mid-remediation: its memory goes, its lease stays until it expires
                name = self.fp_queue.pop(0)[0] if self.fp_queue else "?"
                self.store.append("chaos.crash", "supervisor", {"failpoint": name, "error": str(e)})
                self.supervisor_up = False
                self._arm_failpoint()
                self.at(self.sim_now() + self.tick, "restart_supervisor")
        elif what == "dispatch":
            self._dispatch()
        elif what == "dispatch_tick":
            self.at(self.sim_now() + self.dispatch_tick, "dispatch_tick")
            self._dispatch()
        elif what == "proc_end":
            self._proc_end(*args)
        elif what == "beat":
            self._beat(*args)
        elif what == "fault":
            self._fault(args[0])
        elif what == "adopt":
            self.adopt.step(*args)
        elif what == "restart_supervisor":
            self.supervisor_up = True
            self.holder_n += 1
            self.supervisor = self._new_supervisor()
            self.store.append("chaos.restart", "supervisor", {"holder": f"sim-supervisor-{self.holder_n}"})
        elif what == "restart_dispatcher":
            self.dispatcher_up = True
            if self.next_dispatcher_host:  # the same machine and fleet root, come back under another host id
                self.dispatcher_host, self.next_dispatcher_host = self.next_dispatcher_host, None
                self.dispatcher = self._new_dispatcher(pid=PID_BASE - 2000 - self.holder_n)
            self.store.append("chaos.restart", "dispatcher", {"host": self.dispatcher_host})

    def run(self) -> Result:
        self.begin()
        self.advance(self.sc.duration)
        return self.end()

    def begin(self) -> Result:
        """Set the fleet up and schedule the first steps. `run()` is begin, advance(duration), end; a stateful
        test drives the same three itself (advance a little, inject, look at `history()`, advance again)."""
        result = Result(self.sc, "failed", seed=self.seed, disabled=self.disabled, started=self.wall.now())
        self.setup()
        self.files_before = _files(self.repo)
        result.steady_before = self.steady()
        self.at(0.0, "dispatch_tick")
        self.at(min(1.0, self.tick), "supervise")
        self.faults = resolve(self.sc.faults, [t.id for t in self.store.tickets()], self.seed)  # pick and jitter, seeded
        self.event_faults = [f for f in self.faults if f.on_event]
        for f in self.faults:
            if f.at is not None:
                self.at(float(f.at), "fault", f)
        self.arming = FailpointArming()  # the setting this run found, put back at its end
        self.fp_names = [x[0] for x in self.fp_queue]
        if self.fp_queue:
            self.undo.register("env", name=failpoints.ENV, value=self.arming.saved)
            self._arm_failpoint()
        self.result = result
        self.steps = 0
        self.until = 0.0
        return result

    def advance(self, until: float) -> None:
        """Run every step due at or before `until` (seconds since the start), then leave the clock there."""
        end = max(self.sc.duration, until) or 1.0
        while self.heap and self.heap[0][0] <= until:
            t, _, what, args = heapq.heappop(self.heap)
            self.clock.set(START + t + self.offset)
            self.step(what, args)
            self._event_faults()
            self.steps += 1
            if self.progress and self.steps % 200 == 0:
                self.progress(t / end)
        self.until = max(self.until, until)
        self.clock.set(START + self.until + self.offset)

    def history(self, extra: dict[str, Any] | None = None) -> History:
        """The run so far, as the checkers see it (`extra` overrides the engine's observations)."""
        ex = dict(extra or {})
        if "files_after" not in ex:
            ex["files_after"] = _files(self.repo)
        if "quarantined" not in ex:
            ex["quarantined"] = _quarantined(self.root)
        return History(self.store.events(), {t.id: t for t in self.store.tickets()}, self.store.intents(),
                       START, self.now, self.policy.sentinels.cooldown,
                       {"files_before": {**self.files_before, **self.injected}, "broken_tickets": sorted(self.broken),
                        "broken_since": dict(self.broken_since),
                        "dispatch_paused": bool(self.store.get_setting(PAUSED_KEY, False)),
                        "dispatch_paused_reason": self.store.get_setting(cv.DISPATCH_PAUSED_REASON), "ticks": self.ticks,
                        "leftovers": [], "failpoints_left": [x[0] for x in self.fp_queue],
                        "failpoints_fired": len(self.fp_names) - len(self.fp_queue),
                        "policy": policy_facts(self.policy), **ex})

    def _disarm_failpoints(self) -> None:
        """This process's failpoint setting back as the run found it (the run armed them in its own environment)."""
        if getattr(self, "fp_names", None):
            self.arming.restore()

    def abort(self) -> None:
        """After the run raised: what `end` rolls back that would outlive it in this process (armed failpoints,
        the journal, the store connection), without checking anything."""
        self._disarm_failpoints()
        self.undo.undo_all()
        self.undo.finish()
        try:
            self.store.close()
        except Exception:  # noqa: BLE001 - a store the crash broke: nothing more to close
            pass

    def end(self) -> Result:
        """Roll every fault back, close the store and check the expectations over the whole history."""
        result, end = self.result, self.until
        self._disarm_failpoints()
        result.steady_after = self.steady()
        for p in self.procs.values():  # rollback: nothing outlives the game day, even virtually
            if p.paused:
                p.paused = False
                self.rollbacks.append(Activity(f"continue {p.agent_id}", "rollback", self.wall.now(), self.wall.now(), "succeeded"))
        if self.busy_procs:  # a busy_worktree left in force: the registry's undo ends its holders
            undo(SIM, self, Fault(fault="busy_worktree", at=end))
        for u, what in self.undo.undo_all():
            self.rollbacks.append(Activity(f"undo {u.kind}", "rollback", self.wall.now(), self.wall.now(), "succeeded", what))
        self.undo.finish()  # all undone: the run's journal folder goes (a failed undo keeps it for `gameday clean`)
        files_after, quarantined = _files(self.repo), _quarantined(self.root)  # before the restore check puts files back
        restored = self._restore_check()
        history = self.history({"files_after": files_after, "quarantined": quarantined, "restored": restored})
        result.activities = self.activities
        result.rollbacks = self.rollbacks
        result.stats.update({"ticks": self.ticks, "agents": self.n_agents, "virtual_seconds": end,
                             "standard_invariants": list(STANDARD)})
        self.store.close()
        return finish(result, history, self.wall)

    def wait_busy(self) -> None:
        for _ in range(200):  # until the holder's cwd is visible (poll with a bound, no blind sleep)
            if all(procs.alive(p.pid) and procs.busy_pids(Path(self.root)) for p, _ in self.busy_procs):
                return
            self.wall.sleep(0.01)

    def _restore_check(self) -> dict[str, bool]:
        """Restore every quarantined injected file (into a copy of the fleet) and compare it byte for byte."""
        out: dict[str, bool] = {}
        if not self.injected:
            return out
        for e in qmod.entries(self.root):
            rel = getattr(e, "path", None) or getattr(e, "original", None)
            if rel is None or str(rel) not in self.injected:
                continue
            target = self.root / str(rel)
            if target.exists():
                continue
            try:
                qmod.restore(self.root, e.id, self.wall)
                out[str(rel)] = hashlib.sha256(target.read_bytes()).hexdigest() == self.injected[str(rel)]
                self.store.append("chaos.restored", str(rel), {"ok": out[str(rel)]})
            except Exception as ex:  # noqa: BLE001 - a restore that fails is a finding, not a crash
                out[str(rel)] = False
                self.store.append("chaos.restored", str(rel), {"ok": False, "error": str(ex)})
        return out

    def steady(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for t in self.store.tickets():
            counts[t.state] = counts.get(t.state, 0) + 1
        return {"tickets": counts, "live_agents": sum(1 for p in self.procs.values() if p.alive), "main": self.main,
                "dispatch_paused": bool(self.store.get_setting(PAUSED_KEY, False))}


def _files(repo: SimRepo) -> dict[str, str]:
    """User files of the fleet: outside healer's folder, or inside a ticket's worktree (the product keeps them in
    .healer/worktrees); never git's own (`.git`), nor a file git holds unchanged (its removal loses nothing)."""
    root = repo.root
    out = {}
    for p in root.rglob("*"):
        parts = p.relative_to(root).parts
        user = ".healer" not in parts or (parts[:2] == (".healer", "worktrees") and ".healer" not in parts[2:])
        if p.is_file() and user and ".git" not in parts and not repo.tracked_clean(p):
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _quarantined(root: Path) -> dict[str, str]:
    return {e.id: e.sha256 for e in qmod.entries(root) if e.state == "quarantined"}
