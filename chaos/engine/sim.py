"""The simulated engine: the real core and store on a VirtualClock, agents as virtual processes.

What is real: the SQLite store (in a temp folder), the event log, `healer.core.decide`
(the supervisor's findings, plan, alerts, repair trigger), `healer.core.dispatch.plan`
(budgets, backoff, spinning, replays, red main), `healer.notify.notify` (cooldowns),
ticket transitions through the lifecycle table, the intent journal.
and the REAL remediation executor (`healer.remedy.actions.execute` and `recover`), which
talks to the virtual processes through `SimRuntime` (the Runtime port).
What is simulated: agent processes (a behaviour from chaos/agents/behaviours.py decides
how long each run takes and how it ends), main's colour, worktree contents, and the
dispatcher's shell (a mirror of healer/fleet/dispatcher.py without git: same settings,
same events, same pure plan).

Everything is driven by a heap of timed steps; the only randomness comes from
`random.Random(seed)`, so a run is a pure function of (scenario, seed).
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import os
import random
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from chaos.agents.behaviours import Behaviour, Run, make
from chaos.checkers import STANDARD, History
from chaos.engine import Activity, Result, finish
from chaos.scenario import Fault, Scenario, deep_merge, match
from healer import lifecycle
from healer.clock import Clock, VirtualClock, system
from healer.core.model import AgentView, Memory, Snapshot, WorktreeView
from healer.fleet.snapshot import HOST
from healer.records import Agent, Worktree
from healer.store import open_store

START = 1_700_000_000.0  # a fixed epoch start: a run is reproducible to the second
PAUSED_KEY = "dispatch.paused"  # the settings healer/fleet/dispatcher.py and the executor use
PAUSED_BY_KEY = "dispatch.paused_by"
PAUSED_REASON = "dispatch.paused_reason"
MAIN_STATUS = "main.status"
PID_BASE = 50_000_000  # virtual pids: above any Linux pid_max, so never a real process
VIEW_PARTS = {"tickets": ("tickets", "labels"), "running": ("agents",), "worktrees": ("worktrees",),
              "attempts": ("attempts",), "proposals": ("proposals",), "settings": ("settings",)}  # what view() reads
VIEW_TABLES = tuple(t for ts in VIEW_PARTS.values() for t in ts)
SIM_NOTIFIERS = {"notify": {"notifiers": [{"kind": "jsonl", "path": ".healer/notifications.jsonl"}]}}


@dataclass
class Proc:
    agent_id: str
    ticket: str
    run: Run
    started: float
    alive: bool = True
    paused: bool = False
    ended_early: bool = False  # its end came while it was stopped: it ends on SIGCONT
    gen: int = 0
    pid: int = 0
    exit_code: int | None = None


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
        if self.root.exists():
            shutil.rmtree(self.root)
        (self.root / ".healer").mkdir(parents=True)
        self.store = open_store(self.root, self.clock)
        self._watch_changes()
        self.heap: list[tuple[float, int, str, tuple]] = []
        self.seq = itertools.count()
        self.procs: dict[str, Proc] = {}
        self.by_pid: dict[int, Proc] = {}
        self.runtime = SimRuntime(self)
        self.injected: dict[str, str] = {}  # files a fault wrote: user files the healer must keep (or quarantine)
        self.busy_procs: list = []
        from chaos.faults.undo import UndoJournal, home

        self.undo = UndoJournal(home() / f"{scenario.name}-{Path(workdir).name}-{id(self)}")
        self.world_v = 0
        self._view: dict[str, Any] | None = None
        self._view_key: dict[str, int] | None = None
        self._cuts: dict[str, float] = {}
        self._cuts_seen = 0
        self.behaviours: dict[str, Behaviour] = {}
        self.runs: dict[str, int] = {}
        self.heads: dict[str, str] = {}
        self.merged: set[str] = set()
        self.broken: set[str] = set()
        self.broken_since: dict[str, float] = {}  # a merge before the fault was of good work
        self.main = scenario.fleet.main
        self.main_red_since: float | None = START if self.main == "red" else None
        self.frozen = False
        self.supervisor_up = True
        self.supervisor_paused = False
        self.dispatcher_up = True
        self.dispatcher_paused = False
        self.memory = Memory()
        self.holder_n = 1
        self.files: dict[str, set[str]] = {}  # worktree path -> unknown files in it (relative)
        self.last_tick: float | None = None
        self.last_launch: float | None = None
        self.last_open: float | None = None
        self.last_close: float | None = None
        self.activities: list[Activity] = []
        self.rollbacks: list[Activity] = []
        self.ticks = 0
        self.n_agents = 0
        self.last_event_id = 0
        self.event_faults = [f for f in scenario.faults if f.on_event]
        self.fp_queue: list[tuple[str, str, int]] = []
        from healer import failpoints as _fp

        if any(f.fault == "failpoint" for f in scenario.faults):
            _fp.load_all()  # imports every module to learn every name: only when a glob needs matching
        for f in scenario.faults:
            if f.fault == "failpoint" and f.failpoint:
                for d in _fp.registry():
                    if match(f.failpoint, d.name):
                        self.fp_queue.append((d.name, "raise", f.hit))
        self.fired: set[int] = set()
        self.tick = scenario.tick or self.policy.supervisor.tick
        self.reap_gone = True
        self.dispatch_tick = self.policy.fleet.dispatch_tick
        self.pool = scenario.fleet.pool_size or self.policy.fleet.pool_size
        from healer.core import decide  # the real core; the engine fails loudly if it is missing

        self.decide = decide
        from healer.core import dispatch

        self.dispatch = dispatch
        self.rules = dispatch.RetryRules.of(self.policy)

    # -- time -------------------------------------------------------------------
    @property
    def now(self) -> float:
        return self.clock.now()

    def at(self, t: float, what: str, *args: Any) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), what, args))

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
            from chaos.scenario import TicketSpec

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
                    self.merged.add(tid)
                if spec.state == lifecycle.IN_PROGRESS:
                    wt = None
                    if spec.worktree:
                        wt = self._worktree(tid, created)
                    elif spec.agent != "none":  # its agent worked in a worktree that is no longer on disk
                        wt = str(self.root / "worktrees" / tid)
                    if spec.agent != "none":
                        self.n_agents += 1
                        aid = f"a-{self.n_agents}"
                        # started before this dispatcher (another shell, a crashed host): not ours to reap
                        self.store.upsert_agent(Agent(aid, tid, "running", pid=PID_BASE + self.n_agents, host=HOST,
                                                      run_id=f"run-{tid}-0", worktree=wt, started_at=created,
                                                      heartbeat_at=created, progress_at=created,
                                                      data={"launched_by": "legacy"}))
                        if spec.agent == "live":
                            self._spawn(aid, tid)
                    self.runs[tid] = 1
                if spec.state == lifecycle.REVIEW:
                    self._worktree(tid, created)
        self.store.set_setting(MAIN_STATUS, "unknown")

    def add_ticket(self, tid: str, behaviour: str = "succeeds", params: dict | None = None, priority: int = 2) -> None:
        """A ticket filed mid-run (a human, or a stateful test): queued now, seen by the next dispatch."""
        self.store.add_ticket("scenario ticket", id=tid, priority=priority, actor="gameday", data={"behaviour": behaviour})
        self.behaviours[tid] = make(behaviour, params)
        self.runs[tid] = 0
        self.at(self.sim_now(), "dispatch")

    def _backdate(self, tid: str, created: float, labels: dict[str, float]) -> None:
        # scenarios start mid-story: tickets created (and labels added) in the past
        with self.store.tx() as db:
            db.execute("UPDATE tickets SET created_at=?, updated_at=? WHERE id=?", (created, created, tid))
            for label, age in labels.items():
                db.execute("INSERT OR REPLACE INTO labels VALUES (?,?,?)", (tid, label, START - age))

    def _worktree(self, tid: str, created: float | None = None) -> str:
        path = str(self.root / "worktrees" / tid)
        existing = [w for w in self.store.worktrees() if w.path == path]
        if not existing:
            Path(path).mkdir(parents=True, exist_ok=True)
            self.store.add_worktree(Worktree(path, tid, f"healer/{tid}", created if created is not None else self.now))
            self.files.setdefault(path, set())
        return path

    # -- processes ----------------------------------------------------------------
    def _spawn(self, aid: str, tid: str) -> Proc:
        n = self.runs.get(tid, 0)
        run = self.behaviours[tid].plan(n, self.rng)
        p = Proc(aid, tid, run, self.now, pid=PID_BASE + int(aid.split("-")[-1]))
        self.procs[aid] = p
        self.by_pid[p.pid] = p
        self.store.append("chaos.proc.started", aid, {"ticket": tid, "outcome": run.outcome})
        if run.outcome != "hang":
            self.at(self.sim_now() + run.duration, "proc_end", aid, p.gen)
        return p

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
        if p.run.commit:
            self.heads[tid] = hashlib.sha1(f"{tid}:{self.runs.get(tid, 0)}:{self.seed}".encode()).hexdigest()[:12]
        if p.run.outcome != "die":
            p.exit_code = 0 if p.run.outcome in ("success", "broken", "noop") else 1
        self.store.append("chaos.proc.ended", aid, {"ticket": tid, "outcome": p.run.outcome})
        self.at(self.sim_now(), "dispatch")

    def _kill(self, aid: str) -> bool:
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

    # -- the dispatcher: healer/fleet/dispatcher.py's shell without git, around the real plan()
    def _dispatch(self) -> None:
        if not self.dispatcher_up or self.dispatcher_paused or self.frozen:
            return
        d = self.dispatch
        self._reap()
        main = self._check_main()
        if main != "red":
            self._review()
        v = self.view()
        tickets = v["tickets"]
        if not any(t.state in (lifecycle.QUEUED, lifecycle.REVIEW) for t in tickets):
            self._own_event("dispatch.tick", "", {"launched": 0, "main": main, "live": len(v["running"])})
            return
        attempts = dict(v["attempts"])
        proposals = dict(v["proposals"])
        for tid, c in v["cuts"].items():
            attempts[tid] = [a for a in attempts.get(tid, []) if a.at > c]
            proposals[tid] = [p for p in proposals.get(tid, []) if p.created_at > c]
        live: dict[str, int] = {}
        for a in v["running"]:
            if a.ticket_id:
                live[a.ticket_id] = live.get(a.ticket_id, 0) + 1
        paused = v["paused"]
        inp = d.DispatchInput(self.now, tickets, attempts, proposals, live, self.pool, main, paused)
        plan = d.plan(inp, self.rules)
        for s in plan.stops:
            self._stop(s, attempts.get(s.ticket_id, []))
        for launch in plan.launches:
            self._launch(launch.ticket_id, launch.kind)
        self._own_event("dispatch.tick", "", {"launched": len(plan.launches), "main": main, "live": plan.live_total})

    def _budget_cuts(self) -> dict[str, float]:
        # a human handing a ticket back to the queue gives it a fresh budget (as budget_window does)
        # incremental: the log is append-only, so only the moves since the last read are new
        evs = self.store.events(after=self._cuts_seen, kinds=["ticket.moved"])
        for e in evs:
            if e.payload.get("to") == lifecycle.QUEUED and e.payload.get("from") in (lifecycle.NEEDS_HUMAN, lifecycle.BLOCKED,
                                                                                     lifecycle.DONE, lifecycle.CLOSED):
                self._cuts[e.subject] = e.at
        if evs:
            self._cuts_seen = evs[-1].id
        return dict(self._cuts)

    def _reap(self) -> None:
        from healer.fleet.runtime import EXITED, GONE, Handle

        for a in self.view()["running"]:
            if (a.data or {}).get("launched_by") != "dispatch":
                continue
            st = self.runtime.status(Handle("process", pid=a.pid))
            if st.state not in (EXITED, GONE):
                continue
            if st.state == GONE and a.id in self.procs and not self.reap_gone:
                continue  # a vanished process: the real dispatcher only notices after its own poll; the supervisor may first
            code = st.exit_code if st.state == EXITED else None
            self._ended(a, code)

    def _ended(self, a: Agent, code: int | None) -> None:
        p = self.procs.get(a.id)
        tid = a.ticket_id
        head = self.heads.get(tid or "")
        sig = None if code == 0 else (p.run.signature if (p and p.run.signature) else ("died" if code is None else f"exit {code}"))
        att_id = (a.data or {}).get("attempt")
        if att_id is not None:
            self.store.finish_attempt(att_id, exit_code=code, failure_signature=sig, head=head,
                                      state_hash=hashlib.sha1(f"{head}".encode()).hexdigest()[:12])
        self.store.update_agent(a.id, state="exited" if code is not None else "lost", ended_at=self.now, exit_code=code)
        t = self._ticket(tid) if tid else None
        if t is None or t.state != lifecycle.IN_PROGRESS:
            return
        if code == 0 and p is not None and p.run.outcome in ("success", "broken") and head:
            self.store.move_ticket(tid, lifecycle.REVIEW, actor="dispatch", reason=f"agent {a.id} exited 0", expect=lifecycle.IN_PROGRESS)
            self.store.add_proposal(tid, f"healer/{tid}", head)
            self.last_open = self.now
        else:
            why = "agent died" if code is None else f"agent exited {code}"
            self.store.move_ticket(tid, lifecycle.QUEUED, actor="dispatch", reason=f"{why} ({sig})", expect=lifecycle.IN_PROGRESS)

    def _check_main(self) -> str:
        prev = self.store.get_setting(MAIN_STATUS, "unknown")
        status = self.main if self.policy.fleet.main_gates else "green"  # no main gates: nothing can see red
        if status == prev:
            return status
        self.world_v += 1
        self.store.set_setting(MAIN_STATUS, status)
        if status == "red":
            self.store.set_setting("main.red_since", self.now)
            self.store.append("main.red", "main", {})
            paused = self.policy.fleet.pause_on_red_main
            if paused and not self.store.get_setting(PAUSED_KEY, False):
                self.store.set_setting(PAUSED_REASON, "main_red")
                self.store.set_setting(PAUSED_KEY, True, event="dispatch.paused")
            from healer.core.sentinels import key as sentinel_key
            from healer.notify import notify

            notify(self.store, self.policy, sentinel_key("main_red"),
                   "main branch main is red" + (": dispatch paused" if paused else ""), severity="critical")
        elif prev == "red":
            self.store.set_setting("main.red_since", None)
            self.store.append("main.green", "main", {})
            if self.store.get_setting(PAUSED_REASON) == "main_red":
                self.store.set_setting(PAUSED_REASON, None)
                self.store.set_setting(PAUSED_KEY, False, event="dispatch.resumed_dispatch")
        return status

    def _review(self) -> None:
        for t in [t for t in self.view()["tickets"] if t.state == lifecycle.REVIEW]:  # the store's order, as a query
            props = self.store.proposals(t.id)
            last = props[-1] if props else None
            if last is None:
                self.store.move_ticket(t.id, lifecycle.QUEUED, actor="dispatch", reason="in review without a proposal")
                continue
            if last.state != "open":
                continue
            if t.id in self.broken or self.behaviours[t.id].__class__.__name__ == "BrokenProposal":
                self.store.decide_proposal(last.id, "rejected", "merge gate 'tests' failed on the merge result")
            else:
                self.store.decide_proposal(last.id, "merged", "merge gates passed")
                self.store.set_ticket_data(t.id, merged_commit=last.commit, proposal=last.id)
                self.store.move_ticket(t.id, lifecycle.DONE, actor="dispatch", reason=f"proposal {last.id} merged", expect=lifecycle.REVIEW)
                self.merged.add(t.id)
            self.last_close = self.now

    def _stop(self, s, atts: list) -> None:
        t = self._ticket(s.ticket_id)
        if t is None or t.state == s.to:
            return
        evidence = {"reason": s.reason, "detail": s.detail, "attempts": len(atts), "exit_codes": [a.exit_code for a in atts],
                    "failure_signatures": sorted({a.failure_signature for a in atts if a.failure_signature}),
                    "heads": [a.head for a in atts], "state_hashes": [a.state_hash for a in atts]}
        if s.to == lifecycle.NEEDS_HUMAN:
            self.store.label(t.id, "needs-human", actor="dispatch")
        self.store.comment(t.id, f"healer stopped this ticket: {s.detail}\n```json\n{json.dumps(evidence, indent=1)}\n```", author="healer")
        self.store.move_ticket(t.id, s.to, actor="dispatch", reason=f"{s.reason}: {s.detail}", expect=t.state)
        self.store.append("dispatch.budget_exhausted" if s.to == lifecycle.NEEDS_HUMAN else "dispatch.blocked", t.id,
                          {"reason": s.reason, "detail": s.detail, "attempts": len(atts), "to": s.to})
        if s.to == lifecycle.NEEDS_HUMAN:
            from healer.notify import notify

            notify(self.store, self.policy, f"needs_human:{t.id}", f"{t.id} needs a human: {s.detail}",
                   evidence={"ticket": t.id, "reason": s.reason})

    def _all_attempts(self):
        rows = self.store._q("SELECT * FROM attempts ORDER BY id")
        return [self.store._att(r) for r in rows]

    def _launch(self, tid: str, kind: str) -> None:
        t = self._ticket(tid)
        if t is None or t.state not in (lifecycle.QUEUED, lifecycle.REVIEW):
            return
        wt = self._worktree(tid)
        self.store.move_ticket(tid, lifecycle.IN_PROGRESS, actor="dispatch", reason=kind, expect=t.state)
        self.n_agents += 1
        aid = f"a-{self.n_agents}"
        run_id = f"run-{tid}-{self.runs.get(tid, 0)}"
        att = self.store.add_attempt(tid, kind, run_id=run_id, head=self.heads.get(tid))
        self.store.upsert_agent(Agent(aid, tid, "running", pid=PID_BASE + self.n_agents, host=HOST, run_id=run_id, worktree=wt,
                                      started_at=self.now, heartbeat_at=self.now, progress_at=self.now,
                                      data={"launched_by": "dispatch", "attempt": att.id, "launch": kind}))
        if t.data.get("resume"):
            self.store.set_ticket_data(tid, resume=False)
        event = {"launch": "dispatch.launched", "resume": "dispatch.resumed", "replay": "dispatch.replayed"}[kind]
        self.store.append(event, tid, {"agent": aid, "kind": kind, "run_id": run_id, "attempt": att.id})
        self.last_launch = self.now
        self.store.set_setting("dispatch.last_launch_at", self.now)
        self._spawn(aid, tid)
        self.runs[tid] = self.runs.get(tid, 0) + 1

    # -- the supervisor -------------------------------------------------------------
    def view(self) -> dict[str, Any]:
        """The store's state, each part re-read only when a table it shows was written since the last read
        (`_changes`). This is what keeps 24 h of fleet in seconds."""
        counts = self._changes()
        if self._view is not None and counts == self._view_key:
            return self._view
        old = self._view_key or {}
        v = dict(self._view or {})  # a new dict: a caller holding the last view keeps its own

        def stale(part: str) -> bool:
            return self._view is None or any(counts.get(t) != old.get(t) for t in VIEW_PARTS[part])

        if stale("tickets"):
            v["tickets"] = self.store.tickets()
            v["cuts"] = self._budget_cuts()
        if stale("running"):
            v["running"] = self.store.agents(states=["running"])
        if stale("worktrees"):
            v["worktrees"] = self.store.worktrees()
        if stale("attempts"):
            attempts: dict[str, list] = {}
            for a in self._all_attempts():
                attempts.setdefault(a.ticket_id, []).append(a)
            v["attempts"] = attempts
        if stale("proposals"):
            all_proposals = self.store.proposals()
            proposals: dict[str, list] = {}
            for p in all_proposals:
                proposals.setdefault(p.ticket_id, []).append(p)
            v["proposals"], v["all_proposals"] = proposals, all_proposals
        if stale("settings"):
            v["main_status"] = self.store.get_setting(MAIN_STATUS, "unknown") or "unknown"
            v["main_red_since"] = self.store.get_setting("main.red_since", None)
            v["paused"] = bool(self.store.get_setting(PAUSED_KEY, False))
            v["paused_by"] = _paused_by(self.store.get_setting(PAUSED_BY_KEY, None))
        self._view, self._view_key = v, counts
        return v

    def _watch_changes(self) -> None:
        # Count the writes to each table the view shows, with TEMP triggers: they live on this connection only
        # (the engine's single one; the executor and notify share it), never in the store file. Events, intents,
        # leases and cooldowns do not count, so a tick that only logs forces no re-read; ticket moves (the budget
        # cuts) always come with a write to tickets.
        self.store._db.execute("PRAGMA synchronous=OFF")  # a throwaway store: no fsync at WAL checkpoints
        with self.store.tx() as db:
            db.execute("CREATE TEMP TABLE sim_changes(tbl TEXT PRIMARY KEY, n INTEGER NOT NULL)")
            for table in VIEW_TABLES:
                db.execute("INSERT INTO temp.sim_changes VALUES (?, 0)", (table,))
                for op in ("INSERT", "UPDATE", "DELETE"):
                    db.execute(f"CREATE TEMP TRIGGER sim_{table}_{op.lower()} AFTER {op} ON main.{table} "
                               f"BEGIN UPDATE sim_changes SET n = n + 1 WHERE tbl = '{table}'; END")

    def _changes(self) -> dict[str, int]:
        return {r[0]: r[1] for r in self.store._q("SELECT tbl, n FROM temp.sim_changes")}

    def _own_event(self, kind: str, subject: str, payload: dict) -> None:
        self.store.append(kind, subject, payload)

    def snapshot(self) -> Snapshot:
        now = self.now
        v = self.view()
        views = []
        for a in v["running"]:
            p = self.procs.get(a.id)
            alive = bool(p and p.alive)
            paused = bool(p and p.paused)
            if p and alive:
                beating = p.run.heartbeats or now < p.started + p.run.duration
                hb = now if (beating and not paused) else max(a.heartbeat_at, p.started + (p.run.duration if not p.run.heartbeats else 0))
                progress = now if (p.run.outcome != "hang" and not paused) else max(a.progress_at, p.started)
                a = replace(a, heartbeat_at=hb, progress_at=progress)
            views.append(AgentView(a, alive, paused))
        wts = []
        holders: dict[str, list[int]] = {}  # ticket -> virtual pids of its live procs (one pass, not one per worktree)
        for i, p in enumerate(self.procs.values(), 1):
            if p.alive:
                holders.setdefault(p.ticket, []).append(i)
        for w in v["worktrees"]:
            exists = os.path.exists(w.path)
            busy = tuple(holders.get(w.ticket_id, ())) if w.ticket_id is not None else ()
            wts.append(WorktreeView(w, exists, busy, tuple(sorted(self.files.get(w.path, ()))) if exists else (),
                                    self.heads.get(w.ticket_id or "")))
        attempts = {k: tuple(x) for k, x in v["attempts"].items()}
        return Snapshot(
            now=now, tickets=tuple(v["tickets"]), agents=tuple(views), worktrees=tuple(wts),
            proposals=tuple(v["all_proposals"]), attempts=attempts, merged_tickets=frozenset(self.merged),
            main_status=v["main_status"], main_red_since=v["main_red_since"],
            dispatch_paused=v["paused"], dispatch_paused_by=v["paused_by"],
            pool_size=self.pool, last_launch_at=self.last_launch, last_open_at=self.last_open,
            last_close_at=self.last_close, last_supervisor_tick=self.last_tick,
        )

    def _supervise(self) -> None:
        self.at(self.sim_now() + self.tick, "supervise")
        if not self.supervisor_up or self.supervisor_paused:
            return
        holder = f"sim-supervisor-{self.holder_n}"
        lease = self.store.acquire_lease("supervisor", holder, 1000 + self.holder_n, "sim", self.policy.supervisor.lease_ttl)
        if lease is None:
            self.store.append("supervisor.lease_wait", holder, {})
            return
        from healer.remedy import actions as remedy

        ctx = remedy.Context(self.root, self.store, self.policy, self.clock, runtime=self.runtime, actor="supervisor",
                             batch=f"tick-{self.ticks}")
        remedy.recover(ctx)
        snap = self.snapshot()
        decision = self.decide(snap, self.policy, self.memory)
        self.memory = decision.memory
        for action in decision.actions:
            remedy.execute(ctx, action)
        for action, why in decision.deferred:
            self.store.append("supervisor.deferred", action.subject, {"action": action.action, "why": why})
        from healer.notify import notify

        for alert in decision.alerts:
            notify(self.store, self.policy, alert.key, alert.text, severity=alert.severity, evidence=alert.evidence)
        if decision.repair:
            self._repair(decision)
        self.ticks += 1
        self.last_tick = self.now
        self._own_event("supervisor.tick", holder, {"findings": len(decision.findings), "actions": len(decision.actions),
                                                      "alerts": len(decision.alerts)})

    def _repair(self, decision) -> None:
        self.memory = replace(self.memory, repair_runs=[*self.memory.repair_runs, self.now])
        self.store.append("repair.launched", "repair", {"reason": decision.repair_reason})

    # -- faults -----------------------------------------------------------------------
    def _fault(self, f: Fault) -> None:
        self.world_v += 1
        t0 = self.wall.now()
        out = self.inject(f)
        self.store.append("chaos.fault", f.target or f.fault, {"fault": f.fault, "target": f.target, "result": out})
        self.activities.append(Activity(f"fault {f.fault}" + (f" on {f.target}" if f.target else ""), "action", t0,
                                        self.wall.now(), "succeeded", out))

    def _targets(self, f: Fault) -> list[Proc]:
        return [p for p in self.procs.values() if p.alive and match(f.target or "*", p.ticket)]

    def inject(self, f: Fault) -> str:
        k = f.fault
        if k == "command":  # a real command even in a simulated world: its undo is journaled first, as in real mode
            from chaos.faults.command import inject as run_command

            pr = f.params
            r = run_command(pr["command"], undo=pr.get("undo"), cwd=pr.get("cwd"), timeout=float(pr.get("timeout", 60)),
                            journal=self.undo)
            return f"exit {r['status']}"
        if k == "kill_agent":
            ps = self._targets(f)
            for p in ps:
                p.run = replace(p.run, outcome="die")
                self._kill(p.agent_id)
            return f"killed {len(ps)} agent(s)"
        if k in ("stop_agent", "continue_agent", "hung_agent"):
            ps = [p for p in self.procs.values() if p.alive and match(f.target or "*", p.ticket)]
            for p in ps:
                if k == "stop_agent":
                    p.paused = True
                elif k == "continue_agent":
                    p.paused = False
                    if p.ended_early:
                        self.at(self.sim_now(), "proc_end", p.agent_id, p.gen)
                else:
                    p.run = replace(p.run, outcome="hang", heartbeats=False, duration=self.now - p.started)
                    p.gen += 1
            return f"{k} on {len(ps)} agent(s)"
        if k == "kill_supervisor":
            self.supervisor_up = False
            self.memory = Memory()  # its memory died with it
            self.at(self.sim_now() + float(f.params.get("restart_after", self.tick)), "restart_supervisor")
            return "supervisor killed"
        if k == "stop_supervisor":
            self.supervisor_paused = True
            return "supervisor stopped"
        if k == "continue_supervisor":
            self.supervisor_paused = False
            return "supervisor continued"
        if k in ("kill_dispatcher", "stop_dispatcher"):
            self.dispatcher_up = k == "stop_dispatcher" and self.dispatcher_up
            self.dispatcher_paused = k == "stop_dispatcher"
            if k == "kill_dispatcher" and f.params.get("restart_after"):
                self.at(self.sim_now() + float(f.params["restart_after"]), "restart_dispatcher")
            return k
        if k == "continue_dispatcher":
            self.dispatcher_paused = False
            return k
        if k == "frozen_dispatch":
            self.frozen = True
            return "dispatcher launches nothing from now on"
        if k == "thaw_dispatch":
            self.frozen = False
            return "dispatcher thawed"
        if k == "red_main":
            self.main = "red"
            self.main_red_since = self.now
            return "main is red"
        if k == "green_main":
            self.main = "green"
            self.main_red_since = None
            return "main is green"
        if k == "stale_labels":
            n = 0
            for t in self.store.tickets():
                if match(f.target or "*", t.id):
                    with self.store.tx() as db:
                        db.execute("INSERT OR REPLACE INTO labels VALUES (?,?,?)",
                                   (t.id, f.params.get("label", "to-review"), self.now - float(f.seconds or 3 * 3600)))
                    n += 1
            return f"{n} stale label(s)"
        if k == "unknown_files":
            n = 0
            for w in self.store.worktrees():
                if match(f.target or "*", w.ticket_id or ""):
                    for i in range(f.count):
                        rel = f"stray-{i}.txt"
                        data = f"unknown {i} of {w.ticket_id}\n".encode()
                        (Path(w.path) / rel).write_bytes(data)
                        self.files.setdefault(w.path, set()).add(rel)
                        self.injected[str((Path(w.path) / rel).relative_to(self.root))] = hashlib.sha256(data).hexdigest()
                        n += 1
            return f"{n} unknown file(s)"
        if k == "delete_worktree":
            n = 0
            for w in self.store.worktrees():
                if match(f.target or "*", w.ticket_id or "") and Path(w.path).exists():
                    shutil.rmtree(w.path)
                    n += 1
            return f"{n} worktree(s) deleted"
        if k == "zombie_ticket":
            for tid in [t.id for t in self.store.tickets() if match(f.target or "*", t.id)]:
                self.merged.add(tid)
            return "ticket work marked merged"
        if k == "broken_proposal":
            for tid in [t.id for t in self.store.tickets() if match(f.target or "*", t.id)]:
                self.broken.add(tid)
                self.broken_since.setdefault(tid, self.now)
            return "proposals of the target fail the merge gates"
        if k == "same_commit_repush":
            for tid in [t.id for t in self.store.tickets() if match(f.target or "*", t.id)]:
                self.behaviours[tid] = make("fails_same_commit", {})
            return "agents push the same commit"
        if k == "alert_flood":
            from healer.notify import notify

            keys = int(f.params.get("keys", 5))
            sent = 0
            for i in range(f.count):
                sent += notify(self.store, self.policy, f"flood:{i % keys}", f"external alert {i}", severity="warning")
            return f"{f.count} alerts, {sent} notified"
        if k == "clock_jump":
            s = float(f.seconds or 3600)
            self.clock.jump(s)
            self.offset += s
            return f"wall clock jumped {s:+.0f}s"
        if k == "orphan_worktree":
            n = 0
            for tid in [t.id for t in self.store.tickets() if match(f.target or "*", t.id)]:
                self._worktree(tid, self.now - float(f.seconds or 3600))
                n += 1
            return f"{n} orphan worktree(s)"
        if k == "busy_worktree":
            # a REAL process with its cwd inside: the real executor's busy check must see it
            from healer import procs

            n = 0
            for w in self.store.worktrees():
                if match(f.target or "*", w.ticket_id or "") and Path(w.path).exists():
                    import sys

                    argv = [sys.executable, "-c", "import time; time.sleep(3600)"]
                    marker = f"gameday-busy-{self.seed}-{n}-{id(self)}"
                    proc, tree = procs.spawn(argv, cwd=w.path, marker=marker)
                    self.undo.register("kill_tree", pid=proc.pid, marker=marker, role="busy worktree holder")
                    self.busy_procs.append((proc, tree))
                    n += 1
            self._wait_busy()
            return f"{n} worktree(s) held by a live process"
        if k == "release_worktree":
            for proc, tree in self.busy_procs:
                tree.kill(0.5)
                try:
                    proc.wait(timeout=5)
                except Exception:  # noqa: BLE001 - reaped by the tree kill already
                    pass
            n = len(self.busy_procs)
            self.busy_procs.clear()
            return f"{n} holder process(es) ended"
        if k in ("index_lock", "failpoint"):
            return f"{k}: only meaningful in real mode, ignored"
        return f"unknown fault {k}"

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
        import os

        from healer import failpoints

        if self.fp_queue:
            name, action, hit = self.fp_queue[0]
            os.environ[failpoints.ENV] = f"{name}={action}@{hit}"
        else:
            os.environ.pop(failpoints.ENV, None)
        failpoints.reset()

    def step(self, what: str, args: tuple) -> None:
        if what == "supervise":
            from healer import failpoints

            try:
                self._supervise()
            except failpoints.FailpointError as e:
                # the supervisor died mid-remediation: its memory goes, its lease stays until it expires
                name = self.fp_queue.pop(0)[0] if self.fp_queue else "?"
                self.store.append("chaos.crash", "supervisor", {"failpoint": name, "error": str(e)})
                self.supervisor_up = False
                self.memory = Memory()
                self._arm_failpoint()
                self.at(self.sim_now() + self.tick, "restart_supervisor")
        elif what == "dispatch":
            self._dispatch()
        elif what == "dispatch_tick":
            self.at(self.sim_now() + self.dispatch_tick, "dispatch_tick")
            self._dispatch()
        elif what == "proc_end":
            self._proc_end(*args)
        elif what == "fault":
            self._fault(args[0])
        elif what == "restart_supervisor":
            self.supervisor_up = True
            self.holder_n += 1
            self.store.append("chaos.restart", "supervisor", {"holder": f"sim-supervisor-{self.holder_n}"})
        elif what == "restart_dispatcher":
            self.dispatcher_up = True

    def run(self) -> Result:
        self.begin()
        self.advance(self.sc.duration)
        return self.end()

    def begin(self) -> Result:
        """Set the fleet up and schedule the first steps. `run()` is begin, advance(duration), end; a stateful
        test drives the same three itself (advance a little, inject, look at `history()`, advance again)."""
        result = Result(self.sc, "failed", seed=self.seed, disabled=self.disabled, started=self.wall.now())
        self.setup()
        self.files_before = _files(self.root)
        result.steady_before = self.steady()
        self.at(0.0, "dispatch_tick")
        self.at(min(1.0, self.tick), "supervise")
        for f in self.sc.faults:
            if f.at is not None:
                self.at(f.at, "fault", f)
        from healer import failpoints as _fp

        self.saved_fp = os.environ.get(_fp.ENV)
        self.fp_names = [x[0] for x in self.fp_queue]
        if self.fp_queue:
            self.undo.register("env", name=_fp.ENV, value=self.saved_fp)
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
            ex["files_after"] = _files(self.root)
        if "quarantined" not in ex:
            ex["quarantined"] = _quarantined(self.root)
        return History(self.store.events(), {t.id: t for t in self.store.tickets()}, self.store.intents(),
                       START, self.now, self.policy.sentinels.cooldown,
                       {"files_before": {**self.files_before, **self.injected}, "broken_tickets": sorted(self.broken),
                        "broken_since": dict(self.broken_since),
                        "dispatch_paused": bool(self.store.get_setting(PAUSED_KEY, False)), "ticks": self.ticks,
                        "leftovers": [], "failpoints_left": [x[0] for x in self.fp_queue],
                        "failpoints_fired": len(self.fp_names) - len(self.fp_queue), **ex})

    def end(self) -> Result:
        """Roll every fault back, close the store and check the expectations over the whole history."""
        result, end = self.result, self.until
        if self.fp_names:
            from healer import failpoints as _fp

            if self.saved_fp is None:
                os.environ.pop(_fp.ENV, None)
            else:
                os.environ[_fp.ENV] = self.saved_fp
            _fp.reset()
        result.steady_after = self.steady()
        for p in self.procs.values():  # rollback: nothing outlives the game day, even virtually
            if p.paused:
                p.paused = False
                self.rollbacks.append(Activity(f"continue {p.agent_id}", "rollback", self.wall.now(), self.wall.now(), "succeeded"))
        self._fault(Fault(fault="release_worktree", at=end)) if self.busy_procs else None
        for u, what in self.undo.undo_all():
            self.rollbacks.append(Activity(f"undo {u.kind}", "rollback", self.wall.now(), self.wall.now(), "succeeded", what))
        files_after, quarantined = _files(self.root), _quarantined(self.root)  # before the restore check puts files back
        restored = self._restore_check()
        history = self.history({"files_after": files_after, "quarantined": quarantined, "restored": restored})
        result.activities = self.activities
        result.rollbacks = self.rollbacks
        result.stats.update({"ticks": self.ticks, "agents": self.n_agents, "virtual_seconds": end,
                             "standard_invariants": list(STANDARD)})
        self.store.close()
        return finish(result, history, self.wall)

    def _wait_busy(self) -> None:
        from healer import procs

        for _ in range(200):  # until the holder's cwd is visible (poll with a bound, no blind sleep)
            if all(procs.alive(p.pid) and procs.busy_pids(Path(self.root)) for p, _ in self.busy_procs):
                return
            self.wall.sleep(0.01)

    def _restore_check(self) -> dict[str, bool]:
        """Restore every quarantined injected file (into a copy of the fleet) and compare it byte for byte."""
        from healer.remedy import quarantine as qmod

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


class SimRuntime:
    """The Runtime port over virtual processes: what the real executor and liveness checks talk to."""

    kind = "process"

    def __init__(self, eng: SimEngine) -> None:
        self.e = eng

    def _proc(self, handle) -> Proc | None:
        return self.e.by_pid.get(handle.pid or -1)

    def launch(self, spec):  # pragma: no cover - the sim dispatcher spawns directly
        raise NotImplementedError

    def status(self, handle):
        from healer.fleet.runtime import EXITED, GONE, PAUSED, RUNNING, Status

        p = self._proc(handle)
        if p is None:
            return Status(GONE)
        if p.alive:
            return Status(PAUSED if p.paused else RUNNING)
        if p.exit_code is not None:
            return Status(EXITED, p.exit_code)
        return Status(GONE)

    def stop(self, handle, grace: float) -> None:
        p = self._proc(handle)
        if p is not None:
            self.e._kill(p.agent_id)

    def wait(self, handle, timeout: float):
        return self.status(handle)


def _paused_by(v: Any) -> str | None:
    if isinstance(v, dict):
        return "healer" if v.get("actor") in ("supervisor", "healer") else v.get("actor")
    return v


def _files(root: Path) -> dict[str, str]:
    out = {}
    for p in root.rglob("*"):
        if p.is_file() and ".healer" not in p.relative_to(root).parts:
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _quarantined(root: Path) -> dict[str, str]:
    from healer.remedy import quarantine as qmod

    return {e.id: e.sha256 for e in qmod.entries(root) if e.state == "quarantined"}
