"""The governed loop's shell: processes, git and files around the pure decisions of decide.py.

One iteration (docs/loop.md): preconditions → prompt file → agent in its own session under
a deadline around the whole iteration (its tree killed at the deadline, escapees
included) → protected paths put back → diff cap → gates cheapest first, each under
its own timeout and the iteration's deadline → record (state hash, failure
signature, output key, cost) → progress.md entry, events, checkpoint → state
persisted atomically → decision. All green → commit → exit 0.

Crash safety: the agent tree's marker and pid are persisted before the runner waits
on it, so a resumed run kills the leftovers of a SIGKILLed runner; a green iteration
is persisted with `pending_commit` before the commit, so a resume after a crash
around the commit neither loses it nor commits twice.

This module is the run (its start, the loop of iterations, the commit, the end); one iteration's steps are
in iteration.py (the Runner inherits them), the working tree's git in gitops.py and worktree.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from healer import cgroups, early, errors, failpoints, git, procs, sandbox, watchdog
from healer.clock import Clock, day_of, stamp, system
from healer.errors import InvalidInput, UsageError
from healer.loop import agenthome, agents, decide, gitops, guard, leftovers, loose, worktree
from healer.loop.decide import EXIT_WORDS, Facts, Limits
from healer.loop.iteration import Iteration, _Interrupted, _read_tail
from healer.loop.request import LoopRequest
from healer.loop.state import RunPaths, RunState, bump_daily, check_run_id, daily_count, load, save, write_json_atomic
from healer.store import open_store

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any

    from healer.policy.cache import Frozen
    from healer.policy.schema import Policy

FP_BEFORE_COMMIT = failpoints.declare("loop.before_commit", "healer/loop/runner.py: gates green and persisted as pending commit, not committed")
FP_AFTER_PERSIST = failpoints.declare("loop.after_persist", "healer/loop/runner.py: iteration record persisted (state.json renamed into place)")

@dataclass(frozen=True)
class Outcome:
    run_id: str
    exit_code: int
    reason: str
    iterations: int
    committed: bool
    result_path: Path


def run_loop(req: LoopRequest, clock: Clock | None = None) -> Outcome:
    return Runner(req, clock or system()).run()


def _say(line: str, stream_name: str = "stdout") -> None:
    """One line of the run's narration, best effort: the run's record is its store and its run folder, so a
    reader that went away (a closed pipe, `| head`, a dead log collector) silences the lines, it does not end
    the loop. The stream then points at /dev/null, so later writes and the final flush succeed quietly."""
    stream = getattr(sys, stream_name)
    try:
        print(line, file=stream, flush=True)
    except (BrokenPipeError, ValueError):  # ValueError: the stream was closed under us
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, stream.fileno())
            os.close(null)
        except (OSError, ValueError):
            pass


DEFAULT_TOLERANCE = 180.0  # store.outage_tolerance's default (policies/default.yaml), for a run resumed without a policy


def _outage():
    # the outage rules pull loguru and prometheus_client (~40 ms): only a run that meets a store error, or a PostgreSQL
    # store (which loads them itself), needs them; a run on a cached policy never does (tests/loop/test_policy_cache.py)
    from healer.store import outage  # lazy: pulls loguru, prometheus_client: ~40 ms of `loop run`'s start

    return outage


def _store_away(e: BaseException) -> bool:
    """A store error of the infrastructure's (unreachable, restarting, read-only, failed over, locked), not a full
    disk (the run is cut short, exit 74) nor a damaged store."""
    outage = _outage()
    if isinstance(e, outage.StoreGone):  # the store's own connection gave up past the tolerance
        return True
    return outage.unavailable(e) and not errors.host_trouble(e) and not errors.corrupt(e)


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return f"{type(e).__name__}: " + ((s.splitlines()[0] if s else "-")[:300])


def _cause_of(e: BaseException) -> str | None:
    """The infrastructure's cause of an error that ends the run, or None."""
    # imported here: healer.core (its planner, the policy schema, pydantic) added +360 ms of CPU to the loop's
    # 200 ms of imports (measured 2026-12-05, 15 paired starts on the loaded 2-core machine), and only a run that ends on an error needs it
    from healer.core.endings import cause_of  # lazy: pulls pydantic, networkx: 226 ms of `loop run`'s start

    return cause_of(str(e), type(e).__name__)


class Runner(Iteration):
    def __init__(self, req: LoopRequest, clock: Clock) -> None:
        self.req = req
        self.clock = clock
        self.echo = req.echo or _say
        self.stop_signal: str | None = None
        self.store = None
        self.agent_id = os.environ.get("HEALER_AGENT_ID") if req.fleet_root is not None else None
        self._last_beat = -1e18
        self._lock_fd: int | None = None
        self._old_handlers: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}
        self._wake: tuple[int, int, int] | None = None  # (read end, write end, the previous wake-up fd)
        self.subreaper = False
        self._last_tree: str | None = None  # snapshot after the last iteration's gates: the next one's "before"
        self._before: str | None = None
        self._on_disk: dict[str, tuple] | None = None  # the protected paths on disk before the agent's step
        self._diff_bytes = 0
        self.sbx_mode = "none"
        self._profile: sandbox.Profile | None = None
        self._tmp: Path | None = None  # an unsandboxed iteration's temp dir (healer/loop/iteration.py)
        self._gp: sandbox.GitPaths | None = None  # the worktree's git paths, asked once per run
        self._n = 0  # the iteration under way (where a forged object is set aside)
        self._gsnap_end: guard.GitSnap | None = None  # the git dir after the last check
        self.group: cgroups.Group | None = None  # the run's cgroup: every program in it, emptied after each
        self.dog: watchdog.Watchdog | None = None  # the deadline a stopped runner still keeps
        self._agent_stopped = ""  # why the runner stopped the iteration's agent early: spend_cap | idle
        self._usage: dict = {}  # the iteration's usage, for its event
        self._price_scale = 1.0  # the table's prices raised to the CLI's own bill (usage.calibrate), this process
        # how long the run's store writes wait for a store that is away (the policy's store.outage_tolerance)
        self._tolerance = float(req.policy.store.outage_tolerance) if req.policy is not None else DEFAULT_TOLERANCE
        self._store_gone = False  # a ride-out gave up: the run ends (69) and its last events are best effort

    # -- setup ---------------------------------------------------------------------
    def run(self) -> Outcome:
        lay = git.layout(self.req.workdir) if Path(self.req.workdir).is_dir() else None
        top = lay.top if lay is not None else None
        if top is None:
            raise UsageError(f"--workdir {self.req.workdir}: expected a git working tree, found none")
        self.workdir = top.resolve()
        with self._starting():
            worktree.ignore_own_dir(self.workdir)
            self._take_lock()
        try:
            with self._starting():
                st = self._prepare()
            if isinstance(st, Outcome):
                return st
            self.st = st
            self._install_signals()
            if self.req.subreaper:
                self.subreaper = procs.become_subreaper()
            self.dog = watchdog.start()  # before any program: never mistaken for an orphan of one
            if self.dog is not None:
                self.dog.own(self.group)
            try:
                return self._loop()
            except Exception as e:  # noqa: BLE001 - recorded as exit 70 with the run's evidence kept
                if errors.host_trouble(e):
                    raise self._cut_short(e) from e
                if _store_away(e):  # never the agent's failure: exit 69, the run kept for a resume
                    self._store_gone = True
                    why = str(e) if isinstance(e, errors.StoreUnavailable) else f"the store is unavailable ({_first_line(e)})"
                    return self._finish(errors.UNAVAILABLE, f"{why}; the run is kept: `healer loop run --resume "
                                        f"{self.st.run_id}` once it is back",
                                        "store_unavailable")  # healer/core/endings.py STORE_UNAVAILABLE
                cause = _cause_of(e)  # the infrastructure's, said so for the dispatcher
                if isinstance(e, errors.HealerError):
                    return self._finish(e.exit_code, str(e), cause)
                if os.environ.get("HEALER_DEBUG"):
                    raise
                return self._finish(errors.INTERNAL, f"internal error: {type(e).__name__}: {e}", cause)
        finally:
            self._end_containment()
            self._restore_signals()
            if self.store is not None:
                self.store.close()
            self._release_lock()

    def _end_containment(self) -> None:
        if self.dog is not None:
            self.dog.close()
            self.dog = None
        if self.group is not None:
            with contextlib.suppress(OSError):
                self.group.kill(self.clock)
            self.group.remove()
            self.group = None

    def _take_lock(self) -> None:
        path = self.workdir / ".healer" / "loop.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise UsageError(f"{self.workdir}: another loop is running in this working tree (pid {holder})") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None

    def _install_signals(self) -> None:
        if not self.req.handle_signals or threading.current_thread() is not threading.main_thread():
            return

        def handler(signum, _frame):
            self.stop_signal = signal.Signals(signum).name

        for sig in (signal.SIGTERM, signal.SIGINT):
            self._old_handlers[sig] = signal.signal(sig, handler)
        # a signal also writes a byte here: the waits on the agent and the gates wake up at once and
        # need not poll for it (procs.run), which costs CPU at every wake-up
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        try:
            self._wake = (r, w, signal.set_wakeup_fd(w, warn_on_full_buffer=False))
        except (ValueError, OSError):
            os.close(r)
            os.close(w)
        self.stop_signal = self.stop_signal or early.received  # one that came while the CLI was still loading

    def _restore_signals(self) -> None:
        if self._wake is not None:
            r, w, old_fd = self._wake
            self._wake = None
            signal.set_wakeup_fd(old_fd)
            os.close(r)
            os.close(w)
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers.clear()

    def _open_store(self):
        store = open_store(self.req.fleet_root or self.workdir, self.clock)
        if "healer.store.outage" in sys.modules:  # a store that rides out outages itself (PostgreSQL) loaded it:
            _outage().set_tolerance(self._tolerance)  # its own reconnects give up at the run's bound
        return store

    def _prepare(self) -> RunState | Outcome:
        req = self.req
        if req.resume:
            if not req.run_id:
                raise UsageError("--resume needs a run id")
            self.paths = RunPaths(self.workdir, check_run_id(req.run_id))
            st = load(self.paths)
            # stopped (4) and unavailable (69: a store, model endpoint or sandbox that was away; nothing of the
            # agent's was judged) are interruptions: the run goes on from its last recorded iteration
            if st.status == "ended" and st.exit_code not in (errors.STOPPED, errors.UNAVAILABLE):
                word = EXIT_WORDS.get(st.exit_code, "?") if st.exit_code is not None else "?"
                self.echo(f"loop {st.run_id}: already ended: exit {st.exit_code} ({word}): {st.reason}")
                return Outcome(st.run_id, int(st.exit_code or 0), st.reason, len(st.history), st.committed, self.paths.result)
            if req.policy is not None:
                # a resume may bring a new policy (e.g. the dispatcher's current one): its rules apply from here on
                st.loop = req.policy.loop.model_dump(mode="json")
                st.heartbeat_every = req.policy.fleet.heartbeat
                st.policy_file = req.policy_file
                st.max_iterations = req.policy.loop.max_iterations
                if not req.agent_cmd and not req.preset:
                    st.preset = req.policy.loop.agent.preset
                    st.agent_argv = list(req.policy.loop.agent.command)
            if req.agent_cmd:
                st.preset, st.agent_argv = "command", list(req.agent_cmd)
            elif req.preset:
                st.preset = req.preset
            if req.task is not None:
                st.task, st.task_file = req.task, req.task_file
            if req.max_iterations:
                st.max_iterations = req.max_iterations
            st.resumes += 1
            st.status, st.exit_code, st.reason = "running", None, ""
            if self.paths.pause.exists():
                self.paths.pause.unlink()
            # here, not at module level: the schema imports pydantic, +173 ms of CPU on the loop's 200 ms of imports
            # (measured 2026-12-05, 15 paired starts on the loaded 2-core machine); a run on a cached policy (healer.policy.cache) never needs it
            from healer.policy.schema import Loop  # lazy: pulls pydantic: 112 ms of `loop run`'s start

            self.loop_policy = Loop.model_validate(st.loop)
            self._check_cap(st.max_iterations)
            self.spec = self._agent_spec(st)
        else:
            policy: Policy | Frozen
            if req.policy is None:
                from healer.policy.schema import Policy  # lazy: pulls pydantic: 111 ms of `loop run`'s start (see Loop above)

                policy = Policy()
            else:
                policy = req.policy
            if req.task is None:
                raise UsageError("--task: expected a task file, got none")
            run_id = check_run_id(req.run_id) if req.run_id else self._fresh_id()
            self.paths = RunPaths(self.workdir, run_id)
            if self.paths.state.exists():
                raise UsageError(f"run {run_id!r} already exists in {self.workdir}; continue it with --resume {run_id}")
            self.loop_policy = policy.loop
            baseline, index = worktree.measure(self.workdir)
            start_head = gitops.head(self.workdir)
            self._check_clean(baseline, index, start_head)
            max_it = req.max_iterations or policy.loop.max_iterations
            self._check_cap(max_it)
            preset = "command" if req.agent_cmd else (req.preset or policy.loop.agent.preset)
            st = RunState(
                run_id=run_id, workdir=str(self.workdir), task=req.task, task_file=req.task_file,
                policy_file=req.policy_file, loop=policy.loop.model_dump(mode="json"),
                heartbeat_every=policy.fleet.heartbeat,
                agent_argv=list(req.agent_cmd or policy.loop.agent.command), preset=preset,
                max_iterations=max_it, started_at=self.clock.now(),
                fleet_root=str(req.fleet_root) if req.fleet_root else None,
                baseline_tree=baseline, start_head=start_head,
                allow_dirty=req.allow_dirty, user_staged=gitops.staged(self.workdir) if req.allow_dirty else [],
            )
            self.spec = self._agent_spec(st)
            self._last_tree = st.baseline_tree
        self._guard_sets(st)
        if not self.loop_policy.gates:
            raise InvalidInput(f"{st.policy_file or 'policy'}: loop.gates: expected at least one gate (the only judge of "
                               "success), got none")
        self._check_gates(st)
        self.sbx_mode, warn = sandbox.resolve(self.loop_policy.sandbox, image=self.loop_policy.sandbox_image)
        if warn:
            _say(warn, "stderr")
        if self.loop_policy.sandbox_network_allow and self.sbx_mode == "none":  # nothing restricts it: say so
            _say("healer: warning: loop.sandbox_network_allow: the agent runs unsandboxed (none): its network is not "
                 "restricted", "stderr")
        if st.preset in agents.CLI_PRESETS:  # the real CLIs (healer/loop/agenthome.py): Codex's sandbox flag
            self.spec = self._agent_spec(st)  # follows healer's; a model endpoint out of reach is exit 69 now
            self.loop_policy = agenthome.allow_endpoint(st.preset, procs.environ(), self.loop_policy, self.sbx_mode)
            L = self.loop_policy
            agenthome.preflight(st.preset, procs.environ(), self.sbx_mode, L.sandbox_network,
                                getattr(L, "sandbox_network_allow", None))
        self.limits = Limits.from_policy(self.loop_policy, st.max_iterations)
        st.pid = os.getpid()
        st.pid_started = procs.mark(os.getpid()) or ""
        self.paths.dir.mkdir(parents=True, exist_ok=True)
        self.store = self._open_store()
        self._open_group(st)
        self._kill_leftovers(st)
        self._end_killed_runs(st)
        save(self.paths, st, self.clock.now())
        self._event("loop.started", {
            "workdir": str(self.workdir), "policy": st.policy_file, "task": st.task_file, "preset": st.preset,
            "agent": list(self.spec.argv), "max_iterations": st.max_iterations, "resumed": req.resume,
            "resumes": st.resumes, "from_iteration": len(st.history) + 1, "pid": os.getpid(),
            "gates": [g.name for g in self.loop_policy.gates], "sandbox": self.sbx_mode,
            "sandbox_requested": self.loop_policy.sandbox,
            "ticket": os.environ.get("HEALER_TICKET"),  # the fleet's ticket: spend per ticket (healer/spend.py)
        })
        self.echo(f"loop {st.run_id}: {'resuming at' if req.resume else 'starting'} iteration {len(st.history) + 1} "
                  f"of {st.max_iterations} in {self.workdir}")
        return st

    def _fleet_worktree(self) -> bool:
        """A worktree the fleet made for a ticket: what it holds beyond HEAD is earlier runs' agent work."""
        root = self.req.fleet_root
        if root is None:
            return False
        try:
            self.workdir.relative_to((Path(root) / ".healer" / "worktrees").resolve())
            return True
        except ValueError:
            return False

    def _check_clean(self, tree: str, index, head: str | None) -> None:
        """Start from a clean tree (like the reference loop.sh): the user's uncommitted work is theirs.
        `tree`, `index`: worktree.measure's answer. When the working tree is exactly the (plain) index and
        that index holds HEAD's tree, nothing is staged or changed: no `git status` is needed."""
        if self.req.allow_dirty or self._fleet_worktree():
            return
        if index is not None and tree == gitops.tree_of(self.workdir, head):
            return
        dirty = gitops.dirty_tracked(self.workdir)
        if dirty:
            shown = ", ".join(dirty[:8]) + (f" (+{len(dirty) - 8} more)" if len(dirty) > 8 else "")
            raise InvalidInput(f"{self.workdir}: start from a clean tree: changes to tracked files (staged or not): {shown}; "
                               "commit or stash them, or pass --allow-dirty (they are then never committed by the loop)")

    def _fresh_id(self) -> str:
        return f"{stamp(self.clock.now())[:15]}-{os.urandom(3).hex()}"

    def _check_cap(self, n: int) -> None:
        if n > self.loop_policy.absolute_max:
            raise UsageError(f"--max-iterations {n}: expected at most loop.absolute_max ({self.loop_policy.absolute_max}), got {n}")

    def _agent_spec(self, st: RunState) -> agents.AgentSpec:
        a = self.loop_policy.agent
        spec = agents.preset_spec(st.preset, st.agent_argv if st.preset == "command" else (), a.model, a.max_turns,
                                  a.extra_args, tools=a.tools, sandboxed=self.sbx_mode != "none")
        exe = procs.resolve_python(spec.argv[:1], os.environ.get("PATH"))[0] if spec.argv else ""
        if "{" not in exe and procs.which(exe, path=os.environ.get("PATH")) is None and not (self.workdir / exe).exists():
            if st.preset in agents.CLI_PRESETS:
                raise agenthome.missing(st.preset, exe)
            raise InvalidInput(f"agent command {exe!r}: not found on PATH (preset {st.preset})")
        return spec

    def _check_gates(self, st: RunState) -> None:
        # a gate that can never start can never pass: say so now, like a missing agent, instead of
        # running the agent until a stall. Paths (./check.sh) may be written by the agent: not checked.
        for g in self.loop_policy.gates:
            exe = procs.resolve_python(g.run[:1], os.environ.get("PATH"))[0] if g.run else ""
            if exe and "/" not in exe and "{" not in exe and procs.which(exe, path=os.environ.get("PATH")) is None:
                raise InvalidInput(f"{st.policy_file or 'policy'}: loop.gates[{g.name}].run: command {exe!r} not found on PATH")

    def _open_group(self, st: RunState) -> None:
        """The run's cgroup (healer/cgroups.py), emptied of what a SIGKILLed runner of this run left in it."""
        lim = self.loop_policy.limits
        self.group, left, note = cgroups.open_run(self.workdir, st.run_id, {"pids": lim.pids, "memory": lim.memory},
                                                  self.clock)
        if note:
            _say(note, "stderr")
        if left:
            self._event("loop.leftovers_killed", {"iteration": (st.inflight or {}).get("n"), "killed": left,
                                                  "containers": [], "cgroup": str(self.group.top) if self.group else ""})

    def _kill_leftovers(self, st: RunState) -> None:
        """A runner SIGKILLed mid-iteration leaves its agent tree behind: end it first."""
        inf = st.inflight
        try:
            inf = json.loads(self.paths.agent.read_text()) or inf
        except (OSError, ValueError):
            pass
        if not inf or not inf.get("marker"):
            return
        tree = procs.ProcessTree.adopt(inf["marker"], inf.get("pid"), inf.get("pid_start", inf.get("create_time")))
        killed = tree.kill(self.loop_policy.kill_grace, self.clock)
        gone = sandbox.remove_leftovers(self.workdir) if self.sbx_mode == "container" else []
        st.inflight = None
        if killed or gone:
            self._event("loop.leftovers_killed", {"iteration": inf.get("n"), "killed": killed, "containers": gone})

    def _end_killed_runs(self, st: RunState) -> None:
        """Every start, not only a resume (issue 40): the stale run cgroups of this machine (their runner gone:
        thawed, emptied, removed) and the agent trees of this working tree's other runs whose runner is gone (we
        hold the tree's loop lock: no other runner lives here). healer/loop/leftovers.py."""
        ended = leftovers.at_start((), self.loop_policy.kill_grace, self.clock)
        ended.trees = leftovers.end_trees(self.workdir, self.loop_policy.kill_grace, self.clock, skip=st.run_id)
        for g in ended.groups:
            self._event("loop.leftovers_killed", {"iteration": None, "killed": g.killed, "containers": [],
                                                  "cgroup": g.name, "thawed": g.thawed, "stale": True})
        for t in ended.trees:
            if t["killed"]:
                self._event("loop.leftovers_killed", {"iteration": None, "killed": t["killed"], "containers": [],
                                                      "run": t["run_id"]})

    # -- helpers ---------------------------------------------------------------------
    def _event(self, kind: str, payload: dict) -> None:
        if self.store is not None:
            self._store_call(lambda: self.store.append(kind, self.paths.run_id, payload), kind)

    def _store_call(self, fn: Callable[[], object], what: str) -> object:
        """A store write of the run, riding out a store that is away (unreachable, restarting, read-only, failed over):
        one line when it starts and one when it ends, capped and jittered backoff, and StoreUnavailable (the run ends
        with 69, healer/core/endings.py STORE_UNAVAILABLE, never the agent's failure) past store.outage_tolerance.
        Once a ride-out gave up, the run's last writes (its end) are tried once."""
        first, tries = None, 0
        while True:
            try:
                got = fn()
            except Exception as e:
                if not _store_away(e):
                    raise
                if self._store_gone:
                    return None
                now = self.clock.monotonic()
                if first is None:
                    first = now
                    self.echo(f"loop {self.paths.run_id}: the store is unavailable ({_first_line(e)}); riding it out for "
                              f"up to {self._tolerance:.0f}s (store.outage_tolerance)")
                tries += 1
                if now - first > self._tolerance or self.stop_signal:
                    self._store_gone = True
                    raise errors.StoreUnavailable(f"the store stayed unavailable for {now - first:.0f}s (writing {what}):"
                                                  f" {_first_line(e)}") from e
                self.clock.sleep(_outage().backoff(tries, random.random()))
                continue
            if first is not None:
                self.echo(f"loop {self.paths.run_id}: the store is back after {self.clock.monotonic() - first:.1f}s")
            return got

    def _beat(self, progress: bool | None = None) -> None:
        if not self.agent_id or self.store is None:
            return
        now = self.clock.monotonic()
        if progress is None and now - self._last_beat < self.st.heartbeat_every:
            return
        self._last_beat = now
        try:
            self.store.heartbeat(self.agent_id, progress=bool(progress))
        except Exception:  # noqa: BLE001 - a heartbeat must never break the loop
            pass

    def _should_stop(self) -> bool:
        self._beat()
        return self.stop_signal is not None

    def _waiting(self) -> dict:
        """How procs.run waits on the agent and the gates: woken by a signal's byte when the handlers
        are ours, so `_should_stop` only has to run for the heartbeat (and once a second regardless)."""
        if self._wake is None:
            return {}
        every = self.st.heartbeat_every if self.agent_id else 1.0
        return {"wake_fd": self._wake[0], "poll": max(0.05, min(1.0, every))}

    def _kill_switch(self) -> Path:
        p = Path(self.loop_policy.kill_switch)
        return p if p.is_absolute() else self.workdir / p

    def _facts(self) -> Facts:
        return Facts(elapsed=self.st.active_seconds, today=daily_count(self.workdir, day_of(self.clock.now())),
                     kill_switch=self._kill_switch().exists(), paused=self.paths.pause.exists(),
                     stop_signal=self.stop_signal)

    def _save(self) -> None:
        save(self.paths, self.st, self.clock.now())

    # -- the loop --------------------------------------------------------------------
    def _loop(self) -> Outcome:
        st = self.st
        if self.req.resume:
            # the iteration in flight when the runner died may have touched protected paths
            self._guard_protected(st.history[-1].tree_hash if st.history else st.baseline_tree, "resume",
                                  self._unchecked_disk(len(st.history) + 1))
        if self.req.resume:
            self._count_discarded(len(st.history) + 1)  # the runner died mid-iteration: what its agent spent stays spent
        if self.req.resume and not st.pending_commit:
            self._put_branch_back(len(st.history) + 1, "resume")
        if st.pending_commit:
            try:
                done = self._settle_pending_commit()
            except _Interrupted:
                return self._finish(errors.STOPPED, f"{self.stop_signal} received while verifying a pending commit")
            except sandbox.SandboxFailed as e:
                return self._sandbox_failed(e, len(st.history))
            if done is not None:
                return done
        while True:
            v = decide.preflight(st.history, self.limits, st.cost_usd, self._facts())
            if not v.go_on:
                return self._finish(v.exit_code, v.reason)
            n = len(st.history) + 1
            try:
                rec = self._iterate(n)
            except _Interrupted:
                st.inflight = None
                self._count_discarded(n)
                self._guard_protected(self._before, f"iteration {n} interrupted", self._on_disk)
                return self._finish(errors.STOPPED, f"{self.stop_signal} received during iteration {n} "
                                                    f"(iteration discarded; --resume {st.run_id} redoes it)")
            except sandbox.SandboxFailed as e:
                st.inflight = None
                self._count_discarded(n)
                self._guard_protected(self._before, f"iteration {n}: sandbox failed", self._on_disk)
                return self._sandbox_failed(e, n)
            except agenthome.ModelUnavailable as e:  # the CLI's endpoint never answered: no iteration recorded
                st.inflight = None
                self._count_discarded(n)
                self._guard_protected(self._before, f"iteration {n}: model endpoint unavailable", self._on_disk)
                self._event("loop.model_unavailable", getattr(self, "_model_down", {"n": n, "preset": st.preset}))
                return self._finish(e.exit_code, f"{e} (iteration {n} discarded; the run is kept: --resume {st.run_id})",
                                    "model_unavailable")  # healer/core/endings.py MODEL_UNAVAILABLE
            except agenthome.AgentUnavailable as e:  # the CLI never started: no iteration recorded
                st.inflight = None
                self._guard_protected(self._before, f"iteration {n}: agent did not start", self._on_disk)
                self._event("loop.agent_unavailable", {"n": n, "preset": st.preset, "why": str(e)})
                return self._finish(e.exit_code, f"{e} (iteration {n} discarded; --resume {st.run_id} once fixed)")
            prev = st.history[-1].state_hash if st.history else None
            st.history.append(rec)
            if rec.output_key and rec.output_key not in st.outputs:
                st.outputs[rec.output_key] = n
            st.cost_usd += rec.cost_usd
            st.inflight = None
            verdict = decide.decide(st.history, self.limits, st.cost_usd, self._facts(), st.baseline_tree)
            self._report(rec, verdict)
            if verdict.kind == "success":
                st.pending_commit = {"n": n, "head_before": gitops.head(self.workdir)}
            self._save()
            bump_daily(self.workdir, rec.day, st.run_id, n, rec.cost_usd)
            failpoints.hit(FP_AFTER_PERSIST)
            self._beat(progress=rec.state_hash != prev)
            if verdict.kind == "success":
                return self._commit(n, verdict.reason, measured=rec.tree_hash)
            if not verdict.go_on:
                return self._finish(verdict.exit_code, verdict.reason)

    def _sandbox_failed(self, e: sandbox.SandboxFailed, n: int) -> Outcome:
        """The sandbox never ran the program: no iteration is recorded (an agent that did not run
        must not look like one that made no progress); the loop ends with exit 69 and the sandbox's words."""
        if e.mode == "bwrap":
            sandbox.forget_probe()  # a remembered probe is not trusted again: the next run probes
        self._event("loop.sandbox_failed", {"n": n, "mode": e.mode, "what": e.what, "stderr": e.detail[-4000:]})
        return self._finish(e.exit_code, f"{e} (iteration {n} discarded; fix the sandbox, then --resume {self.st.run_id})",
                            "sandbox_start")  # healer/core/endings.py SANDBOX_START

    # -- endings -----------------------------------------------------------------------
    def _commit(self, n: int, reason: str, measured: str | None = None) -> Outcome:
        """`measured`: the snapshot the gates just passed on (committed as is); None measures again."""
        failpoints.hit(FP_BEFORE_COMMIT)
        st = self.st
        since = st.baseline_tree if st.allow_dirty else gitops.tree_of(self.workdir, st.start_head)
        try:
            self._put_branch_back(n, "commit")
            sha = gitops.commit_changes(self.workdir, gitops.COMMIT_SUBJECT.format(n=n), since or loose.EMPTY_TREE,
                                        st.start_head, self.loop_policy.protected_paths, keep_staged=st.user_staged,
                                        guard=self._guarded,
                                        measured=measured, trailers=gitops.trailers(st.run_id, n, st.start_head))
        except gitops.ProtectedChanged as e:
            st.pending_commit = None
            self._event("loop.commit_refused", {"n": n, "paths": e.paths, "tree": e.tree, "base": e.base,
                                                "why": "protected paths differ from the run's base"})
            return self._finish(errors.STALLED, f"gates green at iteration {n} but {e}")
        except git.GitError as e:
            return self._finish(errors.INTERNAL, f"gates green at iteration {n} but the commit failed: {e}",
                                _cause_of(e))
        self.st.committed = sha is not None
        self.st.commit = sha or gitops.head(self.workdir)
        self.st.pending_commit = None
        note = f"committed {sha[:12]}" if sha else "nothing to commit (the tree already satisfied the gates)"
        return self._finish(errors.OK, f"{reason}; {note}")

    def _settle_pending_commit(self) -> Outcome | None:
        """Resumed after a crash between green gates and the end of the commit."""
        st = self.st
        pc = st.pending_commit or {}
        n = int(pc.get("n", len(st.history)))
        now_head = gitops.head(self.workdir)
        if now_head and now_head != st.start_head and gitops.made_by_run(self.workdir, now_head, st.run_id, st.start_head):
            st.committed, st.commit, st.pending_commit = True, now_head, None
            return self._finish(errors.OK, f"all gates passed at iteration {n}; commit {now_head[:12]} found on resume")
        idir = self.paths.iteration(n) / "verify"
        idir.mkdir(parents=True, exist_ok=True)
        deadline = self.clock.monotonic() + self.loop_policy.iteration_timeout
        if self.sbx_mode != "none":  # the gates run the agent's code: sandboxed here too
            with sandbox.Session(self._loop_profile()) as p:
                self._profile = p
                try:
                    gates, _ = self._gates(idir, deadline)
                finally:
                    self._profile = None
        else:
            gates, _ = self._gates(idir, deadline)
        if gates and all(g.passed for g in gates):
            return self._commit(n, f"all gates passed at iteration {n} (verified again on resume)")
        st.pending_commit = None
        self._save()
        return None

    @contextlib.contextmanager
    def _starting(self):
        """A run that cannot start for the host's trouble (a full disk) says so with the folder it is about."""
        try:
            yield
        except Exception as e:
            if errors.host_trouble(e) and not isinstance(e, errors.HostTrouble):
                raise errors.HostTrouble(f"loop in {self.workdir}: the host took no more writes ({e}); "
                                         "free space, then run it again") from e
            raise

    def _cut_short(self, e: BaseException) -> errors.HostTrouble:
        """The host took no more writes mid-run (an agent can fill the disk): nothing is written over. The run
        stays as a SIGKILL would leave it, its last saved state and iteration folders, and `--resume` goes on
        from there once there is room; a dispatcher that reaps the exit (74) resumes it (its budget counts it)."""
        st = self.st
        try:
            self._event("loop.host_trouble", {"error": str(e)[-300:], "iterations": len(st.history)})
        except Exception:  # noqa: BLE001 - the store is most often on the same full disk
            pass
        return errors.HostTrouble(f"loop {st.run_id}: the host took no more writes ({e}); the run is kept as last "
                                  f"saved: free space, then `healer loop run --resume {st.run_id}`")

    def _finish(self, code: int | None, reason: str, cause: str | None = None) -> Outcome:
        """`cause`: the infrastructure's cause of this end (healer/core/endings.py), written into the result file
        so that the dispatcher counts the attempt against no budget; None when the run ended for its own reasons."""
        st = self.st
        code = errors.INTERNAL if code is None else int(code)
        st.status, st.exit_code, st.reason, st.inflight = "ended", code, reason, None
        self._save()
        last = st.history[-1] if st.history else None
        gate_tail = ""
        if last is not None:
            gate_tail = agents.tail(_read_tail(self.paths.iteration(last.n) / "gates.log", 64 * 1024), 20)
        result = {
            "run_id": st.run_id, "exit_code": code, "exit": EXIT_WORDS.get(code, "?"), "reason": reason,
            "iterations": len(st.history), "failure_signature": last.signature if last else None,
            "state_hash": last.state_hash if last else None,
            "head": st.commit if st.committed else gitops.head(self.workdir),
            "gate_log_tail": gate_tail, "cost_usd": round(st.cost_usd, 6), "committed": st.committed,
            "commit": st.commit, "workdir": str(self.workdir), "ended_at": self.clock.now(), "cause": cause,
        }
        write_json_atomic(self.paths.result, result)
        try:
            self._event("loop.ended", {"exit_code": code, "reason": reason, "iterations": len(st.history),
                                       "committed": st.committed, "cost_usd": round(st.cost_usd, 6)})
        except errors.StoreUnavailable as e:  # ridden out to the tolerance: the result file is the run's word, its end
            self.echo(f"loop {st.run_id}: loop.ended not recorded in the store ({e})")  # stands (a commit made stays 0)
        self._beat(progress=False)
        self.echo(f"loop {st.run_id}: exit {code} ({EXIT_WORDS.get(code, '?')}): {reason}")
        return Outcome(st.run_id, code, reason, len(st.history), st.committed, self.paths.result)
