"""Restart storm: a real fleet whose `healer up` is SIGKILLed again and again, then left to finish.

What an operator does to a self-healing fleet all the time (deploys, crashes, host reboots),
squeezed into a minute. Everything is real: a git repository as the fleet root, the SQLite
store, `healer up` as a child process (dispatcher + supervisor), loop runners it launches
(the scripted stand-in `chaos/agents/fleet_agent.py`, each run taking `agent_delay` seconds so
kills land mid-flight), real merges onto main.

The schedule is a pure function of the seed (`schedule()`): for each kill, how long `up` runs
before it, and whether the kill takes the loop runners down too (a host crash) or only `up`
(a deploy, a crash of healer alone). After the last kill `up` is started once more and left to
finish, then stopped with SIGTERM. The facts the checkers read (`facts()`):

    done / total         tickets done at the end
    merges               proposal.merged events per ticket (each ticket's work on main exactly once)
    off_board_merges     merges of a ticket the board did not have in review at that moment
    unmerged_done        done tickets whose branch head is not on main
    escalations          needs_human / blocked moves, budget_exhausted events, escalate intents
    left                 processes of the run still alive after the final stop
    integrity            PRAGMA integrity_check
    tracebacks           `Traceback` lines in any `up` output
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from chaos.checkers import History
from chaos.engine.base import Result, finish
from chaos.scenario import deep_merge, seconds
from healer import lifecycle, procs
from healer.clock import Clock, system
from healer.errors import HealerError
from healer.store import db_path, open_store
from healer.store.sqlite import SqliteStore

AGENT = Path(__file__).resolve().parent / "agents" / "fleet_agent.py"


@dataclass(frozen=True)
class Kill:
    uptime: float  # seconds `up` runs, once it is up (its first line printed), before this kill
    runners: bool  # the kill takes the loop runners down too (a host crash)


def schedule(seed: int, kills: int, with_runners: float, uptime: tuple[float, float] = (0.2, 3.0)) -> list[Kill]:
    """The storm, from its seed: exactly round(kills * with_runners) of the kills take the runners too."""
    rng = random.Random(seed)
    n_runners = round(kills * with_runners)
    which = set(rng.sample(range(kills), n_runners)) if kills else set()
    return [Kill(round(rng.uniform(*uptime), 3), i in which) for i in range(kills)]


@dataclass
class StormConfig:
    seed: int = 1
    tickets: int = 30
    kills: int = 20
    with_runners: float = 0.5
    pool_size: int = 4
    agent_delay: float = 1.0
    uptime: tuple[float, float] = (0.2, 3.0)
    finish_timeout: float = 300.0


@dataclass
class StormRun:
    cfg: StormConfig
    workdir: Path
    wall: Clock = field(default_factory=system)
    root: Path = field(init=False)
    marker: str = field(init=False)
    outputs: list[str] = field(default_factory=list)
    overrides: dict[str, Any] = field(default_factory=dict)  # deep-merged onto the storm's policy
    logs: Path | None = None  # where `up` writes its output (default: workdir; elsewhere when workdir is a tiny disk)
    kills_done: list[dict[str, Any]] = field(default_factory=list)
    final_code: int | None = None

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir).resolve()
        self.root = self.workdir / "fleet"
        self.marker = f"storm-{self.cfg.seed}-{os.getpid()}-{random.Random().getrandbits(32):08x}"

    # -- the fleet ----------------------------------------------------------------------
    def setup(self) -> None:
        r = self.root
        r.mkdir(parents=True)
        git = ["git", "-c", "user.name=storm", "-c", "user.email=storm@healer.invalid"]
        subprocess.run(["git", "init", "-q", "-b", "main", str(r)], check=True)
        (r / "README.md").write_text("restart storm fleet\n")
        (r / ".gitignore").write_text(".healer/\n")
        subprocess.run([*git, "-C", str(r), "add", "-A"], check=True)
        subprocess.run([*git, "-C", str(r), "commit", "-q", "-m", "init"], check=True)
        (r / ".healer").mkdir()
        cmd = [sys.executable, str(AGENT), "--policy", "{policy}", "--task", "{task_file}", "--workdir", "{workdir}",
               "--root", "{root}", "--run-id", "{run_id}"]
        policy = {
            "version": 1,
            "fleet": {"pool_size": self.cfg.pool_size, "loop_command": cmd, "dispatch_tick": "1s", "heartbeat": "1s"},
            "supervisor": {"tick": "1s", "lease_ttl": "30s"},
            "retry": {"backoff": ["1s", "2s"]},
            "loop": {"kill_grace": "1s"},
            "notify": {"notifiers": [{"kind": "jsonl", "path": ".healer/notifications.jsonl"}]},
        }
        (r / "healer.yaml").write_text(yaml.safe_dump(deep_merge(policy, self.overrides), sort_keys=False))
        s = open_store(r, use_env=False)
        try:
            for i in range(1, self.cfg.tickets + 1):
                s.add_ticket(f"storm ticket {i}", id=f"S-{i}", body="behaviour: success\n")
        finally:
            s.close()

    def env(self) -> dict[str, str]:
        drop = ("HEALER_ROOT", "HEALER_AGENT_ID", "HEALER_FAILPOINTS", "HEALER_FLEET_BEHAVIOUR", "HEALER_DB",
                "HEALER_STORE_URL")  # the storm's fleet has its own store, never the operator's
        e = {k: v for k, v in os.environ.items() if k not in drop}
        e["HEALER_FLEET_DELAY"] = str(self.cfg.agent_delay)
        return e

    def start_up(self, n: int) -> tuple[subprocess.Popen, Path]:
        log = (self.logs or self.workdir) / f"up-{n:02d}.log"
        out = open(log, "wb")  # noqa: SIM115 - handed to the child, closed below
        try:
            proc, _ = procs.spawn([sys.executable, "-m", "healer", "up", "-C", str(self.root)], cwd=self.root,
                                  env=self.env(), stdout=out, stderr=subprocess.STDOUT, marker=self.marker)
        finally:
            out.close()
        return proc, log

    def wait_started(self, proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
        """The storm's clock starts when `up` says it runs (a loaded machine takes seconds to import it)."""
        end = self.wall.monotonic() + timeout
        while self.wall.monotonic() < end and proc.poll() is None:
            try:
                if b"healer up at" in log.read_bytes():
                    return
            except OSError:
                pass
            self.wall.sleep(0.05)

    def ours(self) -> list[int]:
        """Every live process of this run: `up` and whatever it started (they carry the run's marker)."""
        return [p for p in procs._marked_pids(self.marker) if procs.alive(p)]

    def runners(self, up_pid: int) -> list[int]:
        return [p for p in self.ours() if p != up_pid]

    # -- the storm ----------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.setup()
        plan = schedule(self.cfg.seed, self.cfg.kills, self.cfg.with_runners, self.cfg.uptime)
        try:
            for i, k in enumerate(plan):
                proc, log = self.start_up(i)
                self.wait_started(proc, log)
                self.wall.sleep(k.uptime)
                victims = self.runners(proc.pid) if k.runners else []
                proc.send_signal(signal.SIGKILL)
                for p in victims:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                proc.wait()
                self.outputs.append(log.read_text(errors="replace"))
                self.kills_done.append({"n": i, "uptime": k.uptime, "runners": k.runners, "runners_killed": len(victims)})
            self.finish(len(plan))
        finally:
            self.cleanup()
        return self.facts()

    def finish(self, n: int) -> None:
        proc, log = self.start_up(n)
        s = open_store(self.root, use_env=False)
        try:
            end = self.wall.monotonic() + self.cfg.finish_timeout
            while self.wall.monotonic() < end and proc.poll() is None:
                ts = s.tickets()
                if all(t.state in lifecycle.TERMINAL or t.state in (lifecycle.NEEDS_HUMAN, lifecycle.BLOCKED) for t in ts):
                    break
                self.wall.sleep(0.5)
        finally:
            s.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.final_code = proc.returncode
        self.outputs.append(log.read_text(errors="replace"))
        # agents outlive `up` on purpose; the campaign waits for the last ones to end before it counts leftovers
        end = self.wall.monotonic() + 30
        while self.ours() and self.wall.monotonic() < end:
            self.wall.sleep(0.2)

    def cleanup(self) -> list[int]:
        left = self.ours()
        self.left = left
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return left

    # -- what the checkers read -----------------------------------------------------------
    def facts(self) -> dict[str, Any]:
        s = open_store(self.root, use_env=False)
        try:
            tickets = {t.id: t for t in s.tickets()}
            events = s.events()
            intents = s.intents()
        finally:
            s.close()
        f = board_facts(events, tickets, intents)
        main = _git(self.root, "rev-parse", "main")
        f["unmerged_done"] = sorted(tid for tid, t in tickets.items() if t.state == lifecycle.DONE and
                                    (t.data.get("merged_commit") is None or
                                     subprocess.run(["git", "-C", str(self.root), "merge-base", "--is-ancestor",
                                                     t.data["merged_commit"], main], capture_output=True).returncode != 0))
        f.update({
            "left": list(getattr(self, "left", [])), "integrity": integrity(db_path(self.root)),
            "tracebacks": sum(o.count("Traceback (most recent call last)") for o in self.outputs),
            "kills": len(self.kills_done), "runner_kills": sum(1 for k in self.kills_done if k["runners"]),
            "runners_killed": sum(k["runners_killed"] for k in self.kills_done), "final_exit": self.final_code,
        })
        return f


def board_facts(events, tickets: dict[str, Any], intents) -> dict[str, Any]:
    """What the event log and the board say of a storm, whichever world it ran in (real or simulated):
    the tickets done, each one's merges, merges off the board, escalations of any kind."""
    merges = Counter(e.subject for e in events if e.kind == "proposal.merged")
    state: dict[str, str] = {}
    off_board = []
    for e in events:
        if e.kind == "ticket.created":
            state[e.subject] = e.payload.get("state", lifecycle.QUEUED)
        elif e.kind == "ticket.moved":
            state[e.subject] = e.payload["to"]
        elif e.kind == "proposal.merged" and state.get(e.subject) != lifecycle.REVIEW:
            off_board.append(f"{e.subject} merged while {state.get(e.subject)}")
    # a merge is followed by review -> done; a merge with the ticket moved elsewhere meanwhile is off the board
    for tid, t in tickets.items():
        if merges.get(tid) and t.state != lifecycle.DONE:
            off_board.append(f"{tid} merged but {t.state}")
    escal = [f"{e.subject} -> {e.payload['to']}" for e in events if e.kind == "ticket.moved"
             and e.payload.get("to") in (lifecycle.NEEDS_HUMAN, lifecycle.BLOCKED)]
    escal += [f"{e.subject}: {e.kind}" for e in events if e.kind in ("dispatch.budget_exhausted", "dispatch.blocked")]
    escal += [f"{i.subject}: escalate intent {i.state}" for i in intents if i.action == "escalate"]
    return {
        "total": len(tickets), "done": sum(1 for t in tickets.values() if t.state == lifecycle.DONE),
        "not_done": sorted(f"{t.id}:{t.state}" for t in tickets.values() if t.state != lifecycle.DONE),
        "merged_twice": sorted(tid for tid, n in merges.items() if n > 1),
        "never_merged": sorted(tid for tid in tickets if not merges.get(tid)),
        "off_board_merges": off_board, "escalations": escal,
        "interrupted": sum(1 for e in events if e.kind == "attempt.ended"
                           and str(e.payload.get("failure_signature") or "").startswith("interrupted")),
        "events": len(events),
    }


def integrity(db: Path) -> str:
    """The store file's own integrity check ("ok" when intact), through the store."""
    try:
        store = SqliteStore(db, readonly=True)
    except HealerError as e:  # too damaged to open: the refusal is the finding
        return str(e)
    try:
        return store.integrity()
    finally:
        store.close()


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


def problems(f: dict[str, Any]) -> list[str]:
    """What a storm broke, one line each (empty: it healed)."""
    out = []
    if f["done"] != f["total"]:
        out.append(f"{f['done']}/{f['total']} done: {', '.join(f['not_done'][:8])}")
    for k in ("merged_twice", "never_merged", "off_board_merges", "unmerged_done", "escalations", "left"):
        if f[k]:
            out.append(f"{k}: {f[k][:8]}")
    if f["integrity"] != "ok":
        out.append(f"integrity_check: {f['integrity']}")
    if f["tracebacks"]:
        out.append(f"{f['tracebacks']} traceback(s) in `up` output")
    return out


class StormEngine:
    """A restart-storm scenario (`storm:` in the YAML) as a game day: the same Result, checkers and reports."""

    def __init__(self, scenario, workdir: Path, *, seed: int | None = None, disabled: bool = False,
                 overrides: dict | None = None, progress=None, wall: Clock | None = None) -> None:
        self.sc = scenario
        self.seed = scenario.seed if seed is None else seed
        self.wall = wall or system()
        st = scenario.storm
        self.cfg = StormConfig(seed=self.seed, tickets=st.tickets, kills=st.kills, with_runners=st.with_runners,
                               pool_size=st.pool_size, agent_delay=seconds(st.agent_delay),
                               uptime=(seconds(st.uptime[0]), seconds(st.uptime[-1])), finish_timeout=seconds(st.finish_within))
        over = deep_merge(scenario.overrides, scenario.disable if disabled else {})
        self.overrides = deep_merge(over, overrides or {})
        self.disabled = disabled
        self.workdir = Path(workdir)
        self.progress = progress

    def abort(self) -> None:
        """Nothing of this run stays armed in this process (its hosts are children, ended by the storm itself)."""

    def run(self):
        res = Result(self.sc, "error", seed=self.seed, disabled=self.disabled, workdir=str(self.workdir))
        res.started = self.wall.now()
        storm = StormRun(self.cfg, self.workdir, self.wall, overrides=self.overrides)
        facts = storm.run()
        s = open_store(storm.root, use_env=False)
        try:
            events, tickets, intents = s.events(), {t.id: t for t in s.tickets()}, s.intents()
        finally:
            s.close()
        history = History(events, tickets, intents, start=events[0].at if events else res.started, end=self.wall.now(),
                          extra=facts)
        res.stats.update({k: facts[k] for k in ("kills", "runner_kills", "runners_killed", "interrupted", "events")})
        res.steady_after = {"done": facts["done"], "total": facts["total"]}
        return finish(res, history, self.wall)
