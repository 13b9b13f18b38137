"""Adopted loops in the simulated world (issue 44, docs/adopt.md): loops healer did not launch, as the REAL adoption
(healer/adopt.py scan and observe), the REAL supervisor tick and the REAL actions (snapshot_worktree, stop_adopted)
see them, through one swapped port: the process table (healer/adopt.py `ProcTable`), here a list of virtual
processes. Everything else is real: each loop's git worktree, the Claude Code transcript it appends a turn to,
the iteration files it writes; their file times are the world's virtual clock.

A loop's turn is an engine step (`at(t, "adopt", "turn", name, gen)`); the faults (chaos/faults/adopted.py) change how
it behaves: it hangs, bills more, never converges, or vanishes (its pid later taken by a stranger). What the world
saw is written to the store as chaos.adopt.* events, evidence no loop and no healer code can write: each turn
(`chaos.adopt.turn` {loop, n, usd}), each signal the port received (`chaos.adopt.signal` {pid, signal, group,
stranger}: stranger is true when the pid was no live loop of the world's at that moment), each end
(`chaos.adopt.ended` {loop, pid, reason}).
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.faults import NotApplied
from chaos.faults.repo import git, init
from healer.core.adopt import Proc

ADOPT_PID_BASE = 60_000_000  # virtual pids of adopted loops: above any Linux pid_max, never a real process
BOOT_AGO = 86_400.0  # the virtual machine booted a day before the game day began
MODEL = "claude-sonnet-4-5"  # priced by healer/loop/usage.py's built-in table ($3 / $15 per million tokens)


@dataclass
class SimLoop:
    name: str
    pid: int
    worktree: Path
    transcript: Path
    every: float  # seconds between turns
    tokens: int  # input tokens a turn (output: a tenth)
    converge_after: int | None  # it ends by itself after this many turns (None: never)
    n: int = 0
    state: str = "running"  # running | hung | ended
    usd: float = 0.0
    gen: int = 0
    leak: int = 0  # processes each turn leaves running (a dev server, a watcher its tests start and never stop)
    leak_rss: int = 0  # resident bytes of each
    children: list[int] = field(default_factory=list)  # the pids it left running so far
    gates: str | None = None  # the error its gates print after each turn into .loop/gates.log (None: no gates run)
    tool_error: str | None = None  # the error one tool call of each turn returns (a Claude Code tool_result, is_error)
    work: str = "progress"  # what a turn does to work.txt: progress (a new step), cycle (A, B, A, B), still (nothing)


class SimProcTable:
    """The ProcTable port over the world's virtual processes (its loops, and strangers that took a pid)."""

    def __init__(self, world: SimAdopt) -> None:
        self.w = world
        self.procs: dict[int, Proc] = {}
        self.tick = os.sysconf("SC_CLK_TCK")

    def boot_time(self) -> float:
        return self.w.boot

    def scan(self) -> list[Proc]:
        return list(self.procs.values())

    def start_ticks(self, pid: int) -> int | None:
        p = self.procs.get(pid)
        return p.start_ticks if p else None

    def kill_group(self, pgid: int, sig: int) -> None:
        self.w.signalled(pgid, sig, group=True)

    def kill(self, pid: int, sig: int) -> None:
        self.w.signalled(pid, sig, group=False)


class SimAdopt:
    """The world's adopted loops: started, driven and ended by faults and engine steps; seen through `table`."""

    def __init__(self, engine: Any) -> None:
        self.e = engine
        self.base = Path(engine.root).parent / "adopted"
        self.home = Path(engine.root).parent / "adopted-home"
        self.boot = engine.clock.now() - BOOT_AGO
        self.table = SimProcTable(self)
        self.loops: dict[str, SimLoop] = {}
        self.next_pid = ADOPT_PID_BASE + 100_000  # the pids of the processes loops leave running

    # -- the world's own acts ----------------------------------------------------------------
    def _ticks(self) -> int:
        return int((self.e.now - self.boot) * self.table.tick)

    def _touch(self, *paths: Path) -> None:
        for p in paths:
            os.utime(p, (self.e.now, self.e.now))  # the world's time: a file written now, virtually

    def start(self, name: str, every: float, tokens: int, converge_after: int | None) -> str:
        if name in self.loops:
            raise NotApplied(f"an adopted loop named {name} exists already")
        wt = self.base / name
        init(wt, {"task.md": "Make the tests pass.\n"})
        git(wt, "add", "-A")
        git(wt, "commit", "-q", "-m", "task")
        for p in wt.rglob("*"):
            if ".git" not in p.relative_to(wt).parts and p.is_file():
                self._touch(p)
        projects = self.home / ".claude" / "projects" / str(wt).replace("/", "-")
        projects.mkdir(parents=True, exist_ok=True)
        pid = ADOPT_PID_BASE + len(self.loops) + 1
        loop = SimLoop(name, pid, wt, projects / f"sim-{name}.jsonl", every, tokens, converge_after)
        self.loops[name] = loop
        # `bash loop.sh` in its worktree, its own process group (a shell's job, a tmux pane): what a person started
        self.table.procs[pid] = Proc(pid, 1, pid, self._ticks(), ("bash", "loop.sh"), str(wt), os.getuid(),
                                     {"HOME": str(self.home)}, 8 << 20)
        self.e.store.append("chaos.adopt.started", name, {"loop": name, "pid": pid, "worktree": str(wt)})
        self.e.at(self.e.sim_now() + every, "adopt", "turn", name, loop.gen)
        return f"loop {name} started (pid {pid}, a turn every {every:g}s)"

    def loop(self, name: str | None) -> SimLoop:
        loop = self.loops.get(name or "")
        if loop is None or loop.state == "ended":
            raise NotApplied(f"no running adopted loop {name!r}")
        return loop

    def step(self, what: str, *args: Any) -> None:
        """An engine step of the adopted world: a loop's turn, or a stranger taking a freed pid."""
        if what == "turn":
            self._turn(*args)
        elif what == "reuse":
            self._reuse(*args)

    def _turn(self, name: str, gen: int) -> None:
        loop = self.loops[name]
        if loop.state != "running" or loop.gen != gen:
            return  # hung (silent until stopped), ended, or a turn of an earlier pace
        loop.n += 1
        n = loop.n
        out = loop.tokens // 10
        loop.usd += (loop.tokens * 3 + out * 15) / 1_000_000
        line = {"type": "assistant", "sessionId": f"sim-{name}", "cwd": str(loop.worktree), "message": {
            "id": f"msg_{name}_{n}", "model": MODEL, "usage": {"input_tokens": loop.tokens, "output_tokens": out,
                                                                "cache_creation_input_tokens": 0,
                                                                "cache_read_input_tokens": 0}}}
        with loop.transcript.open("a") as f:
            f.write(json.dumps(line) + "\n")
            if loop.tool_error is not None:  # the turn's tool call failed: Claude Code's tool_result block, is_error
                f.write(json.dumps({"type": "user", "sessionId": f"sim-{name}", "cwd": str(loop.worktree), "message": {
                    "role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{name}_{n}",
                                                 "is_error": True, "content": loop.tool_error}]}}) + "\n")
        prompt = loop.worktree / ".loop" / f"prompt-{n}.md"
        prompt.parent.mkdir(exist_ok=True)
        prompt.write_text(f"iteration {n}\n")
        written = [loop.transcript, prompt]
        work = loop.worktree / "work.txt"
        if loop.work == "progress":
            work.write_text(f"step {n}\n")  # progress: the worktree's diff changes every turn
        elif loop.work == "cycle":
            work.write_text("fix A\n" if n % 2 else "fix B\n")  # it undoes its last turn's change, every turn
        if loop.work != "still":
            written.append(work)
        if loop.gates is not None:  # loop.sh's gates after the turn: the same failure, its timing changing
            gates = loop.worktree / ".loop" / "gates.log"
            gates.write_text(f"$ pytest -q\nFAILED tests/test_api.py::test_login - {loop.gates}\n"
                             f"1 failed, 41 passed in {0.4 + n / 100:.2f}s\n")
            written.append(gates)
        self._touch(*written)
        for _ in range(loop.leak):
            self._leave_running(loop)
        self.e.store.append("chaos.adopt.turn", name, {"loop": name, "n": n, "usd": round(loop.usd, 6)})
        if loop.converge_after is not None and n >= loop.converge_after:
            self._end(loop, "converged")
            return
        self.e.at(self.e.sim_now() + loop.every, "adopt", "turn", name, gen)

    def _leave_running(self, loop: SimLoop) -> None:
        """A process the turn started and left running, a child of the loop: every other one in its process group,
        the others daemonised (setsid: a group of their own, still its descendants)."""
        self.next_pid += 1
        pid = self.next_pid
        own_group = len(loop.children) % 2 == 1
        self.table.procs[pid] = Proc(pid, loop.pid, pid if own_group else loop.pid, self._ticks(),
                                     ("node", "vite", "--port", str(5173 + len(loop.children))), str(loop.worktree),
                                     os.getuid(), {}, loop.leak_rss)
        loop.children.append(pid)

    def _end(self, loop: SimLoop, reason: str) -> None:
        loop.state = "ended"
        loop.gen += 1
        self.table.procs.pop(loop.pid, None)
        for pid in loop.children:  # its group's end is theirs; the daemonised ones live on, orphans of init
            p = self.table.procs.get(pid)
            if p is not None and p.pgid == loop.pid:
                self.table.procs.pop(pid)
            elif p is not None:
                self.table.procs[pid] = Proc(p.pid, 1, p.pgid, p.start_ticks, p.argv, p.cwd, p.uid, p.env, p.rss)
        self.e.store.append("chaos.adopt.ended", loop.name, {"loop": loop.name, "pid": loop.pid, "reason": reason})

    def _reuse(self, name: str) -> None:
        loop = self.loops[name]
        if loop.pid in self.table.procs:
            return
        # the kernel gives the freed pid to another process: another start time, an argv no rule matches
        self.table.procs[loop.pid] = Proc(loop.pid, 1, loop.pid, self._ticks(), ("sleep", "3600"), "/", 0, {}, 1 << 20)
        self.e.store.append("chaos.adopt.reused", name, {"loop": name, "pid": loop.pid})

    def signalled(self, pid: int, sig: int, *, group: bool) -> None:
        """A signal the real stop sent through the port: recorded with whether it reached a live loop; a SIGTERM or
        SIGKILL ends the loop (and its group)."""
        loop = next((lp for lp in self.loops.values() if lp.pid == pid and lp.state != "ended"), None)
        name = signal.Signals(sig).name
        self.e.store.append("chaos.adopt.signal", str(pid), {"pid": pid, "signal": name, "group": group,
                                                             "loop": loop.name if loop else None,
                                                             "stranger": loop is None})
        if loop is not None and sig in (signal.SIGTERM, signal.SIGKILL):
            self._end(loop, name)

    # -- faults (chaos/faults/adopted.py) --------------------------------------------------------------
    def hang(self, name: str | None) -> str:
        loop = self.loop(name)
        loop.state = "hung"  # alive, silent: its CLI waits on a stream that never comes
        return f"loop {loop.name} hung after {loop.n} turn(s)"

    def runaway(self, name: str | None, tokens: int) -> str:
        loop = self.loop(name)
        loop.tokens = tokens
        return f"loop {loop.name} now bills {tokens} input tokens a turn"

    def endless(self, name: str | None) -> str:
        loop = self.loop(name)
        loop.converge_after = None
        return f"loop {loop.name} never converges"

    def leak(self, name: str | None, per_turn: int, rss: int) -> str:
        loop = self.loop(name)
        loop.leak, loop.leak_rss = per_turn, rss
        return f"loop {loop.name} leaves {per_turn} process(es) of {rss >> 20} MiB running each turn"

    def failing(self, name: str | None, gates: str | None, tool: str | None) -> str:
        loop = self.loop(name)
        loop.gates, loop.tool_error = gates, tool
        said = [f"its gates fail with {gates!r}"] * (gates is not None) + [f"a tool call fails with {tool!r}"] * (tool is not None)
        return f"loop {loop.name}: each turn " + " and ".join(said or ["passes"])

    def working(self, name: str | None, work: str) -> str:
        loop = self.loop(name)
        if work not in ("progress", "cycle", "still"):
            raise NotApplied(f"params.work is progress, cycle or still, not {work!r}")
        loop.work = work
        exclude = loop.worktree / ".git" / "info" / "exclude"  # its scratch folder ignored: only work.txt is its work
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with exclude.open("a") as f:
            f.write(".loop/\n")
        return f"loop {loop.name}'s turns now do {work} to its worktree"

    def kill(self, name: str | None, reuse_after: float | None) -> str:
        loop = self.loop(name)
        self._end(loop, "killed")  # its whole session, at once: no signal through healer's port
        if reuse_after is not None:
            self.e.at(self.e.sim_now() + reuse_after, "adopt", "reuse", loop.name)
        return f"loop {loop.name} killed (pid {loop.pid})" + (f", its pid reused after {reuse_after:g}s" if reuse_after
                                                              is not None else "")
