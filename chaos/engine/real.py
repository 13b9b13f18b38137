"""The real engine: a temp fleet driven by the real healer processes, faults on real processes and files.

What runs (all real): a git repository on branch main as the fleet root, the SQLite store,
`healer supervise --once` as a child process every `tick` (so a crash is a real SIGKILL of a
real process, and every restart really recovers intents and takes the lease over), a
`healer dispatch` daemon child when tickets wait to be launched (it runs the real governed
loop, `healer loop run`, per ticket), the repair launcher inside the supervisor, real git
worktrees, real quarantine. Thresholds are compressed to seconds by the scenario's policy
overrides, written to the fleet's `healer.yaml`, where every child reads them.

Placeholders in the scenario's policy strings: `{python}` (this interpreter), `{gameday_dir}`
(the run's folder), `{fleet_root}`, `{agents_dir}` (chaos/agents). `{workdir}`, `{run_id}`…
stay for healer itself to fill in.

Every process the engine starts carries the run's tree marker (HEALER_TREE_ANCESTORS), and the
first entry of the run's undo journal kills whatever carries it; each fault journals its own
undo before it acts (SIGCONT for a SIGSTOP, removal of a lock file it created). A game day
killed halfway is cleaned up by the next `healer gameday run` or `healer gameday clean`.

Time: the loop polls every 50 ms (wall clock through the Clock port); `at:` is seconds since
the start. It ends at `duration` (the cap) or earlier, once it has settled: no timed fault or
failpoint left, the `real.until` event seen, `real.settle_ticks` supervisor ticks in a row
that changed nothing, no agent running and nothing queued for a running dispatcher.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

from chaos.agents.models import gameday as kit
from chaos.checkers import History
from chaos.engine.base import CHANGES, SUPERVISOR_SIDE, Activity, Result, apply_fault, finish
from chaos.engine.base import signame as _signame
from chaos.faults import process as pfault
from chaos.faults import repo
from chaos.faults.containers import LABEL_FLEET
from chaos.faults.schedule import describe, resolve
from chaos.faults.undo import UndoJournal, home
from chaos.faults.worlds import REAL, inject
from chaos.scenario import Scenario, deep_merge, match
from chaos.scenario_parts import Fault, TicketSpec
from chaos.workdir import fresh
from healer import clock, failpoints, lifecycle, procs
from healer import quarantine as qmod
from healer.clock import Clock, system
from healer.containers.client import connect
from healer.fleet.ports import RealGit
from healer.fleet.snapshot import HOST
from healer.policy.schema import Policy
from healer.records import Agent, Worktree
from healer.store import keys, open_store

AGENTS_DIR = Path(__file__).resolve().parents[1] / "agents"
NOTIFIERS = {"notify": {"notifiers": [{"kind": "jsonl", "path": ".healer/notifications.jsonl"}]}}
POLL = 0.05
SCRIPTS_ENV = "HEALER_FLEET_SCRIPTS"  # chaos/agents/fleet_agent.py: a folder of per-ticket behaviours set by faults
SEED_ENV = "HEALER_FLEET_SEED"  # chaos/agents/fleet_agent.py: its random choices come from the run's seed
# the task-file behaviours of chaos/agents/fleet_agent.py, by the simulated engine's names
BEHAVIOURS = {"succeeds": "success", "fails": "fail", "fails_same_commit": "fail", "dies": "die", "hangs": "hang",
              "broken_proposal": "broken", "noop": "noop"}
# `random` in real mode: a run-by-run script drawn from the seed (mostly successes, as the simulated Random draws)
RANDOM = ("success", "success", "success", "fail,success", "die,success", "broken,success", "noop")


@dataclass
class Child:
    role: str
    n: int
    proc: subprocess.Popen
    tree: procs.ProcessTree
    started: float  # seconds since the start
    log: Path
    armed: str | None = None  # the failpoint it was started with
    first_event: int = 0
    faulted: str | None = None  # a fault killed it


class RealEngine:
    def __init__(self, scenario: Scenario, workdir: Path, *, seed: int | None = None, disabled: bool = False,
                 overrides: dict | None = None, progress=None, wall: Clock | None = None) -> None:
        self.sc = scenario
        self.seed = scenario.seed if seed is None else seed
        self.disabled = disabled
        self.wall = wall or system()
        self.progress = progress
        self.gd = Path(workdir).resolve()
        self.root = self.gd / "fleet"
        self.trash = self.gd / "trash"  # where a vanished worktree goes (delete_worktree)
        self.git = RealGit()  # the faults' way into the fleet's repository (chaos/faults/checkouts.py)
        self.run_id = f"{scenario.name}-{uuid.uuid4().hex[:8]}"
        self.marker = f"gameday-{self.run_id}"
        self.values = {"python": sys.executable, "gameday_dir": str(self.gd), "fleet_root": str(self.root),
                       "agents_dir": str(AGENTS_DIR)}
        self.policy = self._policy(overrides)
        self.tick = float(scenario.tick or self.policy.supervisor.tick)
        self.undo = UndoJournal(home() / f"real-{self.run_id}", self.wall)
        self.store: Any = None
        self.t0 = 0.0  # monotonic at the start
        self.start = 0.0  # wall clock at the start
        self.activities: list[Activity] = []
        self.rollbacks: list[Activity] = []
        self.injected: dict[str, str] = {}  # fleet-relative path -> sha256 of files a fault wrote
        self.outside_before: dict[str, str] = {}
        self.holders: list[tuple[subprocess.Popen, procs.ProcessTree]] = []
        self.sup: Child | None = None
        self.disp: Child | None = None
        self.children = 0
        self.ticks = 0
        self.quiet = 0
        self.next_sup = 0.0
        self.restart_next = False
        self.disp_restart_at: float | None = None
        self.disp_host: str | None = None  # kill_dispatcher's params.host: the dispatcher comes back under that id
        self.fp_queue: list[tuple[str, str, int]] = []
        self.fp_total = 0
        self.fp_missed: list[str] = []
        self.fired: set[int] = set()
        self.faults: list[Fault] = list(scenario.faults)  # resolved (pick, jitter) at setup
        self.scripts: dict[str, str] = {}  # ticket -> the scripted agent's behaviour at the start
        self.nth: dict[int, int] = {}
        self.last_event_id = 0
        self.until_seen = False
        self.quiet_from: int | None = None
        self.last_fault = -1.0  # seconds since the start of the last fault injected
        # agents in containers, or container faults: the fleet's containers belong to the game day (issue 8)
        self.containers = self.policy.fleet.runtime == "container" or any(f.fault.startswith("container_")
                                                                          for f in scenario.faults)
        self._docker: Any = None
        self.model: Any = None  # real.model: the scripted model server of the real CLIs (issue 32)
        self.model_env: dict[str, str] = {}

    # -- policy -------------------------------------------------------------------------
    def _policy(self, overrides: dict | None) -> Policy:
        pol = self.sc.effective_policy(deep_merge(NOTIFIERS, overrides or {}), self.disabled)
        data = _subst(pol.model_dump(mode="json", by_alias=True), self.values)
        return Policy.model_validate(data)

    # -- helpers ------------------------------------------------------------------------
    @property
    def now(self) -> float:
        """The world's wall clock (a `World`'s, chaos/faults/world.py): the run's clock."""
        return self.wall.now()

    def elapsed(self) -> float:
        return self.wall.monotonic() - self.t0

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        # the game day's fleet has its own store: an operator's exported HEALER_STORE_URL never reaches it
        env = {k: v for k, v in os.environ.items() if k not in (failpoints.ENV, "HEALER_ROOT", "HEALER_DB", "HEALER_STORE_URL")}
        env.update(repo.GIT_ID)
        # the run's marker: procs.spawn moves it among the ancestors' markers of each child's own tree
        env[procs.MARKER] = self.marker
        env.pop(procs.ANCESTORS, None)
        # the run's clock (clock_jump) and its agents' scripts (same_commit_repush, broken_proposal): files the
        # healer processes (healer/clock.py) and the scripted agents (chaos/agents/fleet_agent.py) read
        env[clock.OFFSET_ENV] = str(self.gd / "clock-offset")
        env[SCRIPTS_ENV] = str(self.gd / "scripts")
        env[SEED_ENV] = str(self.seed)
        env.update(self.model_env)
        env.update(extra or {})
        return env

    def jump_clock(self, seconds: float) -> float:
        """Move the wall clock of every healer process of the run by `seconds` more; the total offset."""
        path = self.gd / "clock-offset"
        total = (float(path.read_text() or 0) if path.exists() else 0.0) + seconds
        if not path.exists():
            self.undo.register("remove_file", path=str(path), role="the run's clock offset")
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{total}\n")
        tmp.replace(path)  # atomic: a reader sees the old offset or the new one
        return total

    def script(self, ticket: str, behaviour: str) -> None:
        """From its next run on, the ticket's scripted agent plays `behaviour` (chaos/agents/fleet_agent.py)."""
        d = self.gd / "scripts"
        d.mkdir(exist_ok=True)
        tmp = d / f".{ticket}.tmp"
        tmp.write_text(behaviour + "\n")
        tmp.replace(d / ticket)

    def spawn(self, role: str, argv: list[str], extra_env: dict[str, str] | None = None) -> Child:
        self.children += 1
        log = self.gd / "logs" / f"{self.children:03d}-{role}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as out:
            proc, tree = procs.spawn(argv, cwd=self.root, env=self.env(extra_env), stdout=out, stderr=subprocess.STDOUT,
                                     marker=f"{self.marker}-{role}-{self.children}")
        c = Child(role, self.children, proc, tree, self.elapsed(), log, first_event=self.store.last_event_id())
        self.store.append("chaos.spawn", role, {"pid": proc.pid, "n": c.n, "argv": argv[2:6]})
        return c

    def note(self, kind: str, subject: str, payload: dict) -> None:
        self.store.append(kind, subject, payload)

    # -- setup --------------------------------------------------------------------------
    def setup(self) -> None:
        fresh(self.root, self.gd / "scripts", self.gd / "clock-offset", *(self.gd / rel for rel in self.sc.real.pidfiles))
        self.gd.mkdir(parents=True, exist_ok=True)
        for rel, text in self.sc.real.outside.items():
            p = self.gd / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        self.outside_before = _tree_hash(self.gd, list(self.sc.real.outside))
        if self.sc.real.model:
            self.model, self.model_env = kit.start(self.gd, self.sc.real.model)
        repo.init(self.root)
        for rel, text in self.sc.fleet.files.items():
            p = self.root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        for rel, target in self.sc.real.symlinks.items():
            (self.root / rel).symlink_to(_subst(target, self.values))
        (self.root / ".healer").mkdir()
        (self.root / "healer.yaml").write_text(yaml.safe_dump(self.policy.model_dump(mode="json", by_alias=True),
                                                              sort_keys=False))
        self.store = open_store(self.root, self.wall, use_env=False)
        self.start = self.wall.now()
        self.store.append("chaos.start", self.sc.name, {"run": self.run_id, "mode": "real", "seed": self.seed,
                                                        "disabled": self.disabled})
        n_agents = 0
        rng = random.Random(self.seed)
        specs = list(self.sc.fleet.tickets)
        for i in range(self.sc.fleet.random_tickets):  # as the simulated engine draws them
            specs.append(TicketSpec(id=f"R-{i + 1}", behaviour="random", priority=rng.randint(1, 3)))
        for spec in specs:
            ids = spec.ids()
            for k, tid in enumerate(ids):
                blocked = list(spec.blocked_by)
                if spec.cycle and len(ids) > 1:
                    blocked.append(ids[(k + 1) % len(ids)])
                created = self.start - spec.age
                behaviour = rng.choice(RANDOM) if spec.behaviour == "random" else BEHAVIOURS.get(spec.behaviour, spec.behaviour)
                self.scripts[tid] = behaviour
                body = f"behaviour: {behaviour}\n" + "".join(f"{k2}: {v}\n" for k2, v in spec.params.items())
                self.store.add_ticket(spec.title, id=tid, body=body, priority=spec.priority, blocked_by=blocked,
                                      actor="gameday", state=spec.state, data={"behaviour": spec.behaviour})
                with self.store.tx():  # started mid-story, as the simulated engine does it: through the port
                    self.store.backdate_ticket(tid, created, actor="gameday")
                    for label, age in spec.labels.items():
                        self.store.label(tid, label, actor="gameday", at=self.start - age)
                if spec.merged:
                    self.store.set_ticket_data(tid, merged_commit=repo.head(self.root))
                wt = None
                if spec.worktree and spec.state in (lifecycle.IN_PROGRESS, lifecycle.REVIEW):
                    wt = str(repo.add_worktree(self.root, tid))
                    self.store.add_worktree(Worktree(wt, tid, f"healer/{tid}", created))
                if spec.state == lifecycle.IN_PROGRESS and spec.agent != "none":
                    n_agents += 1
                    pid = self._dead_pid() if spec.agent == "dead" else self._live_agent(wt or self.root)
                    self.store.upsert_agent(Agent(f"legacy-{n_agents}", tid, "running", pid=pid, host=HOST,
                                                  run_id=f"run-{tid}-0", worktree=wt, started_at=created,
                                                  heartbeat_at=created, progress_at=created, data={"launched_by": "legacy"}))
        self.faults = resolve(self.sc.faults, [t.id for t in self.store.tickets()], self.seed)  # pick and jitter, seeded
        self.note("chaos.schedule", self.sc.name, {"seed": self.seed, "tickets": self.scripts, "faults": describe(self.faults)})
        failpoints.load_all()
        for f in self.sc.faults:
            if f.fault == "failpoint" and f.failpoint:
                for d in failpoints.registry():
                    if match(f.failpoint, d.name):
                        self.fp_queue.append((d.name, f.action, f.hit))
        self.fp_total = len(self.fp_queue)
        self.last_event_id = self.store.last_event_id()

    def _dead_pid(self) -> int:
        p = subprocess.Popen(["true"])
        p.wait()
        return p.pid

    def _live_agent(self, cwd: str | Path) -> int:
        proc, tree = pfault.hold(self.undo, cwd, env=self.env(), role="legacy agent", clock=self.wall)
        return proc.pid

    def wants_dispatcher(self) -> bool:
        mode = self.sc.real.dispatcher
        if mode == "auto":
            return any(t.state in (lifecycle.QUEUED, lifecycle.REVIEW) for t in self.sc.fleet.tickets)
        return mode == "daemon"

    # -- the processes ------------------------------------------------------------------
    def start_supervisor(self) -> None:
        extra: dict[str, str] = {}
        armed = None
        if self.fp_queue and not self.restart_next:
            name, action, hit = self.fp_queue[0]
            if name.startswith(SUPERVISOR_SIDE):
                extra[failpoints.ENV] = f"{name}={action}@{hit}"
                armed = name
            else:
                self.fp_queue.pop(0)
                self.note("chaos.failpoint_skipped", name, {"why": "real mode arms supervisor-side failpoints only"})
        self.sup = self.spawn("supervisor", [sys.executable, "-m", "healer", "supervise", "--once", "--root", str(self.root)],
                              extra)
        self.sup.armed = armed
        if self.quiet_from is not None:  # changes made between two ticks count against the next one
            self.sup.first_event = min(self.sup.first_event, self.quiet_from)

    def supervisor_ended(self) -> None:
        c, self.sup = self.sup, None
        assert c is not None
        rc = c.proc.returncode
        self.ticks += 1
        crashed = False
        if c.armed:
            name, action, hit = self.fp_queue.pop(0)
            if rc != 0:
                crashed = True
                self.note("chaos.crash", "supervisor", {"failpoint": name, "action": action, "exit": rc,
                                                        "signal": _signame(rc), "pid": c.proc.pid})
            else:
                self.fp_missed.append(name)
                self.note("chaos.failpoint_missed", name, {"action": action, "hit": hit, "pid": c.proc.pid})
        elif c.faulted:
            crashed = True
            self.note("chaos.crash", "supervisor", {"fault": c.faulted, "exit": rc, "signal": _signame(rc), "pid": c.proc.pid})
        elif rc != 0:
            self.note("chaos.proc_failed", "supervisor", {"exit": rc, "signal": _signame(rc), "tail": _tail(c.log)})
        self.note("chaos.exit", "supervisor", {"pid": c.proc.pid, "exit": rc, "n": c.n})
        changed = self.store.events(after=c.first_event, prefix=None)
        # a tick that began before the last fault may not have seen it: it proves nothing about quiet
        if crashed or rc != 0 or c.started <= self.last_fault or any(e.kind.startswith(CHANGES) for e in changed):
            self.quiet = 0
        else:
            self.quiet += 1
        self.restart_next = crashed
        self.quiet_from = self.store.last_event_id()
        self.next_sup = self.elapsed() + (min(self.tick, 0.2) if crashed else self.tick)

    def start_dispatcher(self) -> None:
        self.disp = self.spawn("dispatcher", [sys.executable, "-m", "healer", "dispatch", "--root", str(self.root)],
                               {"HEALER_HOST_ID": self.disp_host} if self.disp_host else None)
        self.disp_restart_at = None

    def watch(self) -> None:
        if self.sup is not None:
            if self.sup.proc.poll() is not None:
                self.supervisor_ended()
            elif self.elapsed() - self.sup.started > max(60.0, self.policy.repair_agent.timeout + 30):
                self.sup.faulted = "tick overran its bound"
                self.sup.tree.kill(0.5, self.wall)
        elif self.sc.real.supervisor == "once" and self.elapsed() >= self.next_sup:
            self.start_supervisor()
        if self.disp is not None and self.disp.proc.poll() is not None:
            rc = self.disp.proc.returncode
            if not self.disp.faulted:
                self.note("chaos.proc_failed", "dispatcher", {"exit": rc, "signal": _signame(rc), "tail": _tail(self.disp.log)})
            self.note("chaos.exit", "dispatcher", {"pid": self.disp.proc.pid, "exit": rc, "n": self.disp.n})
            self.disp = None
        if self.disp is None and self.disp_restart_at is not None and self.elapsed() >= self.disp_restart_at:
            self.note("chaos.restart", "dispatcher", {})
            self.start_dispatcher()

    # -- settling -----------------------------------------------------------------------
    def settled(self, timed: list[Fault]) -> bool:
        if timed or self.fp_queue or self.sup is not None or self.quiet < self.sc.real.settle_ticks:
            return False
        if any(f.on_event and i not in self.fired for i, f in enumerate(self.faults)):
            return False  # a fault still waits for its event, as a timed one for its time: quiet so far proves nothing
        if self.disp_restart_at is not None:
            return False
        u = self.sc.real.until
        if u and not self.until_seen:
            self.until_seen = _seen(self.store, u)
            if not self.until_seen:
                return False
        running = self.store.agents(states=["running"])
        if any(procs.alive(a.pid) for a in running if a.pid):
            return False  # a live agent may still change things (a record of a dead one does not)
        if any(self.container_alive(a) for a in running if not a.pid and a.kind == "container" and a.container):
            return False
        if self.disp is not None and (self.store.tickets(states=[lifecycle.QUEUED, lifecycle.REVIEW])
                                      or any((a.data or {}).get("launched_by") == "dispatch" for a in running)
                                      or self._launch_in_flight()):
            return False  # the running dispatcher still has work: a launch, a review, an ended agent to reap
        return True

    def _launch_in_flight(self) -> bool:
        """A ticket the running dispatcher has moved to in progress and opened an attempt for, whose agent is
        not registered yet (a container takes a while to create): the launch is under way. Without this the
        run could settle in that gap and end before the ticket's agent even started."""
        for t in self.store.tickets(states=[lifecycle.IN_PROGRESS]):
            attempts = self.store.attempts(t.id)
            last = attempts[-1] if attempts else None
            if last is None or last.ended_at is not None:
                continue
            if not any(a.started_at >= last.at for a in self.store.agents(ticket_id=t.id)):
                return True
        return False

    def gave_up(self, el: float) -> bool:
        u, within = self.sc.real.until, self.sc.real.until_within
        if self.disabled and self.sc.real.disabled_within is not None:
            within = self.sc.real.disabled_within
        if not u or within is None or el < float(within) or self.until_seen:
            return False
        self.until_seen = _seen(self.store, u)
        if self.until_seen:
            return False
        self.note("chaos.gave_up", self.sc.name, {"after": round(el, 2), "waiting_for": u})
        return True

    # -- faults -------------------------------------------------------------------------
    def fault(self, f: Fault) -> None:
        t0 = self.wall.now()
        self.last_fault = self.elapsed()
        self.quiet = 0  # quiet ticks before a fault say nothing about after it
        status, out, kind = apply_fault(self.inject, f)
        self.note(kind, f.target or f.fault, {"fault": f.fault, "target": f.target, "result": out,
                                              **({} if status == "succeeded" else {"status": status})})
        self.activities.append(Activity(f"fault {f.fault}" + (f" on {f.target}" if f.target else ""), "action", t0,
                                        self.wall.now(), status, out))

    def docker(self) -> Any:
        if self._docker is None:
            self._docker = connect()
        return self._docker

    def fleet_label(self) -> str:
        return f"{LABEL_FLEET}={self.root}"

    def container_alive(self, a: Agent) -> bool:
        """Running or paused, read through the SDK (an engine that does not answer: counted alive)."""
        try:
            import docker.errors  # lazy: docker SDK, 55 ms (-X importtime) on `gameday list` (load_all)

            try:
                return self.docker().containers.get(a.container).status in ("running", "paused", "restarting", "created")
            except docker.errors.NotFound:
                return False
        except Exception:  # noqa: BLE001 - cannot tell: never silently dead
            return True

    def fleet_containers(self, status: str | None = None) -> list[str]:
        if not self.containers:
            return []
        try:
            filters = {"label": self.fleet_label(), **({"status": status} if status else {})}
            return sorted(f"{c.name} ({c.status})" for c in self.docker().containers.list(all=True, filters=filters))
        except Exception as e:  # noqa: BLE001 - an engine gone at the end is a finding, not a crash
            return [f"cannot list the fleet's containers: {type(e).__name__}: {e}"]

    def inject(self, f: Fault) -> str:
        return inject(REAL, self, f)

    def event_faults(self) -> None:
        faults = [(i, f) for i, f in enumerate(self.faults) if f.on_event and i not in self.fired]
        if not faults:
            return
        evs = self.store.events(after=self.last_event_id, kinds=sorted({f.on_event for _, f in faults}))
        self.last_event_id = max([self.last_event_id, *[e.id for e in evs]])
        for e in evs:
            for i, f in faults:
                if i in self.fired or not match(f.on_event, e.kind) or not match(f.subject, e.subject):
                    continue
                self.nth[i] = self.nth.get(i, 0) + 1
                if self.nth[i] == f.nth:
                    self.fired.add(i)
                    self.fault(f)

    # -- the run ------------------------------------------------------------------------
    def abort(self) -> None:
        """Nothing of this run stays armed in this process (its healer processes are children, undone through the undo journal)."""

    def run(self) -> Result:
        result = Result(self.sc, "failed", seed=self.seed, disabled=self.disabled, started=self.wall.now())
        self.first_undos()
        extra: dict[str, Any] = {}
        try:
            self.setup()
            files_before = _files(self.root)
            result.steady_before = self.steady()
            self.t0 = self.wall.monotonic()
            self.loop()
            result.steady_after = self.steady()
            extra = self.observe()
            extra["files_before"] = {**files_before, **self.injected}
        finally:
            self.wind_down()
        extra["leftovers"] = self.leftovers()
        extra["containers_paused"] = self.fleet_containers("paused")  # after the rollback: none may be left
        extra["containers_left"] = self.fleet_containers()
        if not extra["leftovers"]:
            self.undo.finish()  # all undone: nothing for `gameday clean` to find
        extra["restored"] = self.restore_check()
        if self.store is None:
            raise RuntimeError("the fleet could not be set up")
        history = History(self.store.events(), {t.id: t for t in self.store.tickets()}, self.store.intents(),
                          self.start, self.wall.now(), self.policy.sentinels.cooldown, extra)
        result.activities = self.activities
        result.rollbacks = self.rollbacks
        result.stats.update({"ticks": self.ticks, "children": self.children, "wall_seconds": round(self.elapsed(), 2),
                             "fleet": str(self.root), "undo": str(self.undo.folder)})
        self.store.close()
        return finish(result, history, self.wall)

    def first_undos(self) -> None:
        """The run's own undos, journaled before anything is started (applied last, newest first)."""
        if self.containers:  # undone last, after the marker's processes (the dispatcher that launches them) are gone
            self.undo.register("containers_cleanup", fleet=str(self.root), role="the fleet's containers")
        self.undo.register("kill_marker", marker=self.marker, role=f"game day {self.sc.name}")

    def loop(self) -> None:
        timed = sorted((f for f in self.faults if f.at is not None), key=lambda f: float(f.at or 0))
        while timed and float(timed[0].at or 0) <= 0:  # `at: 0s` is the start: before any healer process runs
            self.fault(timed.pop(0))
        if self.wants_dispatcher():
            self.start_dispatcher()
        cap = float(self.sc.duration)
        while True:
            el = self.elapsed()
            if el >= cap or el >= float(self.sc.timeout):
                self.note("chaos.cap", self.sc.name, {"after": round(el, 2)})
                break
            while timed and float(timed[0].at or 0) <= el:
                self.fault(timed.pop(0))
            self.event_faults()
            self.watch()
            if self.settled(timed):
                self.note("chaos.settled", self.sc.name, {"after": round(el, 2), "ticks": self.ticks})
                break
            if self.gave_up(el):
                break
            if self.progress:
                self.progress(min(0.99, el / cap))
            self.wall.sleep(POLL)

    def observe(self) -> dict[str, Any]:
        """What the world looks like at the end, before anything is rolled back."""
        if self.sup is not None:  # let the last tick finish (bounded)
            try:
                self.sup.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.sup.faulted = "still running at the end"
                self.sup.tree.kill(0.5, self.wall)
                self.sup.proc.wait(timeout=5)
            self.supervisor_ended()
        self.stop_dispatcher()
        for proc, tree in self.holders:  # the engine's own props are not corpses
            pfault.release(proc, tree, self.wall)
        self.holders.clear()
        corpses: list[str] = []
        deadline = self.wall.monotonic() + 1.5
        while True:  # processes on their way out get a moment to finish dying
            left = pfault.carrying(self.marker)
            if not left or self.wall.monotonic() >= deadline:
                corpses = [pfault.describe(p) for p in left]
                break
            self.wall.sleep(POLL)
        for f, pid in pfault.pids_in([self.gd / rel for rel in self.sc.real.pidfiles]):
            self.note("chaos.pid", str(pid), {"alive": self.ours_alive(pid), "file": f.name})
        stopped = [pfault.describe(p) for p in pfault.carrying(self.marker) if procs.stopped(p.pid)]
        files_after = _files(self.root)
        ents = qmod.entries(self.root)
        return {"corpses": corpses, "stopped": stopped, "files_after": files_after,
                "quarantined": {e.id: e.sha256 for e in ents if e.state == "quarantined"},
                "quarantine_paths": [str(e.path) for e in ents],
                "outside_unchanged": _tree_hash(self.gd, list(self.sc.real.outside)) == self.outside_before,
                "failpoints_left": [x[0] for x in self.fp_queue], "failpoints_missed": self.fp_missed,
                "failpoints_fired": self.fp_total - len(self.fp_queue) - len(self.fp_missed),
                "ticks": self.ticks, "dispatch_paused": bool(self.store.get_setting(keys.DISPATCH_PAUSED, False)),
                "dispatch_paused_reason": self.store.get_setting(keys.DISPATCH_PAUSED_REASON),
                "git_worktrees": repo.worktree_list(self.root), "unregistered_worktrees": self.unregistered()}

    def unregistered(self) -> list[str]:
        """Linked git worktrees the store does not list as active: orphans nobody will ever clean."""
        active = {str(Path(w.path).resolve()) for w in self.store.worktrees()}
        return [w for w in repo.worktree_list(self.root)
                if Path(w).resolve() != self.root.resolve() and str(Path(w).resolve()) not in active]

    def ours_alive(self, pid: int) -> bool:
        """Alive AND still one of ours (a recycled pid belongs to a stranger without our marker)."""
        if not procs.alive(pid):
            return False
        try:
            return procs._carries(psutil.Process(pid).environ(), self.marker)
        except psutil.AccessDenied:
            return True  # cannot tell: counted alive, never silently dead
        except psutil.Error:
            return False

    def stop_dispatcher(self) -> None:
        c = self.disp
        if c is None:
            return
        self.disp = None
        self.disp_restart_at = None
        pfault.cont(c.proc.pid, tree=False)  # a frozen dispatcher must wake to handle SIGTERM
        try:
            c.proc.send_signal(signal.SIGTERM)  # it releases its lease; its agents keep running (they are judged)
            c.proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pfault.kill(c.proc.pid, tree=False)
            c.proc.wait(timeout=5)
        if self.store is not None:
            self.note("chaos.exit", "dispatcher", {"pid": c.proc.pid, "exit": c.proc.returncode, "n": c.n})

    def wind_down(self) -> None:
        """Always: stop what the engine started, then undo every fault (the journal, newest first)."""
        for c in (self.sup, self.disp):
            if c is not None and c.proc.poll() is None:
                c.tree.kill(0.5, self.wall)
                try:
                    c.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        self.sup = self.disp = None
        if self.model is not None:
            self.model.stop()  # after the fleet: a hung stream ends only now
            self.model = None
        for proc, tree in self.holders:
            pfault.release(proc, tree, self.wall)
        self.holders.clear()
        for u, what in self.undo.undo_all():
            now = self.wall.now()
            self.rollbacks.append(Activity(f"undo {u.kind}" + (f" ({u.data['role']})" if u.data.get("role") else ""),
                                           "rollback", now, now, "failed" if what.startswith("failed") else "succeeded", what))

    def leftovers(self) -> list[str]:
        """After the rollback: anything of this game day still there is a leftover."""
        out = [f"process {pfault.describe(p)}" for p in pfault.carrying(self.marker)]
        for u in self.undo.registered("remove_file"):
            p = Path(u.data["path"])
            if p.exists() and p.read_text(errors="replace") == u.data.get("content"):
                out.append(f"lock file {p}")
        out += [f"container {c}" for c in self.fleet_containers()]
        if self.store is not None:
            for name in ("supervisor", "dispatcher"):
                lease = self.store.lease(name)
                if lease is not None:
                    out.append(f"lease {name} still held by {lease.holder} (pid {lease.pid}, "
                               f"{'alive' if procs.alive(lease.pid) else 'dead'})")
        return out

    def restore_check(self) -> dict[str, bool]:
        """Restore every quarantined injected file and compare it byte for byte."""
        out: dict[str, bool] = {}
        if not self.injected or self.store is None:
            return out
        for e in qmod.entries(self.root):
            rel = str(e.path)
            if rel not in self.injected or e.state != "quarantined" or (self.root / rel).exists():
                continue
            try:
                qmod.restore(self.root, e.id, self.wall)
                out[rel] = hashlib.sha256((self.root / rel).read_bytes()).hexdigest() == self.injected[rel]
                self.note("chaos.restored", rel, {"ok": out[rel]})
            except Exception as ex:  # noqa: BLE001 - a restore that fails is a finding, not a crash
                out[rel] = False
                self.note("chaos.restored", rel, {"ok": False, "error": str(ex)})
        return out

    def steady(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for t in self.store.tickets():
            counts[t.state] = counts.get(t.state, 0) + 1
        return {"tickets": counts, "running_agents": len(self.store.agents(states=["running"])),
                "dispatch_paused": bool(self.store.get_setting(keys.DISPATCH_PAUSED, False))}


# -- helpers ------------------------------------------------------------------------------

def _subst(v: Any, values: dict[str, str]) -> Any:
    if isinstance(v, str):
        for k, x in values.items():
            v = v.replace("{" + k + "}", x)
        return v
    if isinstance(v, list):
        return [_subst(x, values) for x in v]
    if isinstance(v, dict):
        return {k: _subst(x, values) for k, x in v.items()}
    return v


def _seen(store, sel: dict[str, Any]) -> bool:
    kind = sel.get("kind")
    for e in store.events(kinds=[kind] if kind and "*" not in kind else None):
        if match(sel.get("kind"), e.kind) and match(sel.get("subject"), e.subject) \
                and all(e.payload.get(k) == v for k, v in (sel.get("payload") or {}).items()):
            return True
    return False


def _tail(log: Path, n: int = 6) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def _files(root: Path) -> dict[str, str]:
    """User files of the fleet: everything but git's and healer's own folders."""
    out = {}
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if not p.is_file() or p.is_symlink() or rel.parts[0] == ".git" or (
                rel.parts[0] == ".healer" and rel.parts[1:2] != ("worktrees",)) or (
                rel.parts[:1] == (".healer",) and len(rel.parts) > 3 and rel.parts[3] == ".git"):
            continue  # git's and healer's own files; the files in the fleet's worktrees are user files
        out[str(rel)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _tree_hash(base: Path, rels: list[str]) -> dict[str, str]:
    out = {}
    for rel in rels:
        p = base / rel
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "missing"
    return out
