"""The governed loop's shell: processes, git and files around the pure decisions of decide.py.

One iteration (SPEC §5): preconditions → prompt file → agent in its own session under
a deadline around the whole iteration (its tree killed at the deadline, escapees
included) → protected paths put back → diff cap → gates cheapest first, each under
its own timeout and the iteration's deadline → record (state hash, failure
signature, output key, cost) → progress.md entry, events, checkpoint → state
persisted atomically → decision. All green → commit → exit 0.

Crash safety: the agent tree's marker and pid are persisted before the runner waits
on it, so a resumed run kills the leftovers of a SIGKILLed runner; a green iteration
is persisted with `pending_commit` before the commit, so a resume after a crash
around the commit neither loses it nor commits twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from healer import cgroups, early, environ, errors, failpoints, git, netbox, procs, sandbox, watchdog
from healer.clock import Clock, day_of, iso, stamp, system
from healer.errors import InvalidInput, UsageError
from healer.loop import agenthome, agents, decide, gitops, guard, loose, objects, ownfiles, protect, usage, worktree
from healer.loop import state as loop_state
from healer.loop import tap as tap_mod
from healer.loop.decide import EXIT_WORDS, Facts, GateResult, IterationRecord, Limits, Verdict
from healer.loop.state import RunPaths, RunState, bump_daily, check_run_id, daily_count, load, save, write_json_atomic
from healer.store import open_store

FP_BEFORE_AGENT = failpoints.declare("loop.before_agent", "healer/loop/runner.py: prompt written, agent not started yet")
UNCHECKED = "protected-before.json"  # the protected paths on disk before the agent, until its step is compared
CHECKED = "protected-before.checked.json"
FP_AFTER_AGENT = failpoints.declare("loop.after_agent", "healer/loop/runner.py: agent tree ended or killed, nothing reverted yet")
FP_BEFORE_GATES = failpoints.declare("loop.before_gates", "healer/loop/runner.py: protected paths and diff cap applied, gates not run")
FP_BEFORE_COMMIT = failpoints.declare("loop.before_commit", "healer/loop/runner.py: gates green and persisted as pending commit, not committed")
FP_AFTER_PERSIST = failpoints.declare("loop.after_persist", "healer/loop/runner.py: iteration record persisted (state.json renamed into place)")

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing
if TYPE_CHECKING:
    from healer.policy.schema import Policy

READ_CAP = 1 << 20  # bytes of agent output / gate log read back for hashing


class _Interrupted(Exception):
    pass


@dataclass
class LoopRequest:
    workdir: Path
    policy: Policy | None = None  # or healer.policy.cache's Frozen view of one: only read
    policy_file: str | None = None
    task: str | None = None
    task_file: str | None = None
    preset: str | None = None  # overrides loop.agent.preset
    agent_cmd: list[str] | None = None  # implies preset "command"
    run_id: str | None = None
    resume: bool = False
    fleet_root: Path | None = None  # events (and heartbeats) go to this fleet's store
    max_iterations: int | None = None
    allow_dirty: bool = False  # start on a tree with changes to tracked files; they are never committed
    subreaper: bool = False  # adopt orphans of the agent tree (the CLI runner sets this)
    handle_signals: bool = True
    echo: Callable[[str], None] | None = None


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


def _read_tail(path: Path, cap: int = READ_CAP) -> str:
    return ownfiles.read_tail(path, cap)  # never through a link an agent put in place


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


def _cause_of(e: BaseException) -> str | None:
    """The infrastructure's cause of an error that ends the run, or None."""
    # imported here: healer.core (its planner, the policy schema, pydantic) added +360 ms of CPU to the loop's
    # 200 ms of imports (measured 2026-12-05, 15 paired starts on the loaded 2-core machine), and only a run that ends on an error needs it
    from healer.core.endings import cause_of

    return cause_of(str(e), type(e).__name__)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:40] or "gate"


class Runner:
    def __init__(self, req: LoopRequest, clock: Clock) -> None:
        self.req = req
        self.clock = clock
        self.echo = req.echo or _say
        self.stop_signal: str | None = None
        self.store = None
        self.agent_id = os.environ.get("HEALER_AGENT_ID") if req.fleet_root is not None else None
        self._last_beat = -1e18
        self._lock_fd: int | None = None
        self._old_handlers: dict[int, object] = {}
        self._wake: tuple[int, int, int] | None = None  # (read end, write end, the previous wake-up fd)
        self.subreaper = False
        self._last_tree: str | None = None  # snapshot after the last iteration's gates: the next one's "before"
        self._before: str | None = None
        self._on_disk: dict[str, tuple] | None = None  # the protected paths on disk before the agent's step
        self._diff_bytes = 0
        self.sbx_mode = "none"
        self._profile: sandbox.Profile | None = None
        self._gp: sandbox.GitPaths | None = None  # the worktree's git paths, asked once per run
        self._n = 0  # the iteration under way (where a forged object is set aside)
        self._gsnap_end: guard.GitSnap | None = None  # the git dir after the last check
        self.group: cgroups.Group | None = None  # the run's cgroup: every program in it, emptied after each
        self.dog: watchdog.Watchdog | None = None  # the deadline a stopped runner still keeps
        self._agent_stopped = ""  # why the runner stopped the iteration's agent early: spend_cap | idle
        self._usage: dict = {}  # the iteration's usage, for its event
        self._price_scale = 1.0  # the table's prices raised to the CLI's own bill (usage.calibrate), this process

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
        return open_store(self.req.fleet_root or self.workdir, self.clock)

    def _prepare(self) -> RunState | Outcome:
        req = self.req
        if req.resume:
            if not req.run_id:
                raise UsageError("--resume needs a run id")
            self.paths = RunPaths(self.workdir, check_run_id(req.run_id))
            st = load(self.paths)
            if st.status == "ended" and st.exit_code != errors.STOPPED:
                word = EXIT_WORDS.get(st.exit_code, "?")
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
            from healer.policy.schema import Loop

            self.loop_policy = Loop.model_validate(st.loop)
            self._check_cap(st.max_iterations)
            self.spec = self._agent_spec(st)
        else:
            if req.policy is None:
                from healer.policy.schema import Policy  # pydantic: see Loop above

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
        save(self.paths, st, self.clock.now())
        self._event("loop.started", {
            "workdir": str(self.workdir), "policy": st.policy_file, "task": st.task_file, "preset": st.preset,
            "agent": list(self.spec.argv), "max_iterations": st.max_iterations, "resumed": req.resume,
            "resumes": st.resumes, "from_iteration": len(st.history) + 1, "pid": os.getpid(),
            "gates": [g.name for g in self.loop_policy.gates], "sandbox": self.sbx_mode,
            "sandbox_requested": self.loop_policy.sandbox,
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
                                                  "containers": [], "cgroup": str(self.group.top)})

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

    # -- helpers ---------------------------------------------------------------------
    def _event(self, kind: str, payload: dict) -> None:
        if self.store is not None:
            self.store.append(kind, self.paths.run_id, payload)

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
            verdict = decide.after_iteration(st.history, self.limits, st.cost_usd, self._facts(), st.baseline_tree)
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

    def _guard_protected(self, reference: str | None, why: str, on_disk: dict[str, tuple] | None = None) -> None:
        """Undo changes to protected paths made since `reference` (a snapshot) outside a
        complete iteration: an interrupted one, or the one in flight when the runner died. `on_disk`: the
        protected paths as the disk held them before that iteration's agent, when its step was not
        compared yet: what changed there where git cannot see it (ignored files) is undone too."""
        if not reference:
            return
        wd, L = self.workdir, self.loop_policy
        try:
            now = worktree.snapshot(wd)
            changed = gitops.changed_between(wd, reference, now)
        except git.GitError:  # the reference tree was pruned: nothing to compare with
            return
        prot = [p for p in changed if protect.protected(p, L.protected_paths)]
        if on_disk is not None:
            prot += protect.hidden_changes(wd, now, on_disk, protect.protected_on_disk(wd, L.protected_paths), set(prot))
        if not prot:
            return
        n = len(self.st.history) + 1
        moves = protect.put_back(wd, reference, prot, self.paths.quarantine(n), f"loop {self.st.run_id}: protected path ({why})",
                                self.clock)
        self._last_tree = None
        self._event("loop.protected_reverted", {"n": None, "why": why, "paths": prot, "moves": [m.__dict__ for m in moves]})
        self._append_own("progress.md", f"## {why} · run {self.st.run_id}\n- reverted (protected paths, copies in "
                                        f"quarantine): {', '.join(prot)}\n\n", n)

    def _checked(self, idir: Path) -> None:
        """The agent's step is compared: its before-state is no longer needed to judge it (what the gates
        write under a protected path is not judged, docs/security.md). Renamed, kept for the record."""
        self._on_disk = None
        with contextlib.suppress(FileNotFoundError):
            os.replace(idir / UNCHECKED, idir / CHECKED)

    def _unchecked_disk(self, n: int) -> dict[str, tuple] | None:
        """The protected paths on disk before iteration n's agent, when its step was never compared (the runner
        died in between); None otherwise, or when the record cannot be read (git's view alone then)."""
        try:
            with open(self.paths.iteration(n) / UNCHECKED) as f:
                got = json.load(f).get("protected_on_disk")
        except (OSError, ValueError, AttributeError):
            return None
        if not isinstance(got, dict):
            return None
        return {str(k): tuple(v) for k, v in got.items() if isinstance(v, list)}

    def _iterate(self, n: int) -> IterationRecord:
        """One iteration, inside a fresh sandbox session (its own private temp dir) when sandboxed,
        with the git common dir and the outside world compared before and after."""
        # the git dir as the last iteration's check left it: nothing of the loop's writes there in
        # between; in a fleet other loops move refs meanwhile, so there it is read again
        self._n = n
        self._adopt_objects(n)  # what a runner killed after a program's end had not adopted yet
        last, self._gsnap_end = self._gsnap_end, None
        self._gsnap = last if last is not None and self.req.fleet_root is None else \
            guard.git_capture(self.workdir, fleet=self.req.fleet_root is not None)
        watch = self.sbx_mode == "none"
        roots = guard.outside_roots(self.workdir, self.req.fleet_root, self._gsnap.common if self._gsnap else None) \
            if watch else []
        seen = guard.scan(roots) if watch else {}
        try:
            if self.sbx_mode == "none":
                return self._iterate_body(n)
            with sandbox.Session(self._loop_profile()) as p:
                self._profile = p
                return self._iterate_body(n)
        finally:
            self._profile = None
            self._check_git(n, "iteration")
            if watch:
                paths = guard.written(seen, guard.scan(roots))
                if paths:
                    self._event("loop.outside_write", {"n": n, "sandbox": self.sbx_mode, "count": len(paths),
                                                       "paths": paths[:200]})
                    self._note(n, f"## iteration {n}: writes outside the working tree (unsandboxed agent)\n- "
                               + ", ".join(paths[:20]) + (f" (+{len(paths) - 20} more)" if len(paths) > 20 else ""))

    def _own_folders(self, idir: Path) -> None:
        """An unsandboxed agent may have deleted the loop's own folder: the loop writes on regardless
        (its files are re-created; what the agent removed is reported)."""
        if idir.is_dir() and self.paths.dir.is_dir():
            return
        worktree.MEMORY.ignored_dirs.discard(self.workdir / worktree.HEALER_DIR / ".gitignore")
        worktree.ignore_own_dir(self.workdir)
        idir.mkdir(parents=True, exist_ok=True)
        self._event("loop.outside_write", {"n": idir.name, "sandbox": self.sbx_mode, "count": 1,
                                           "paths": [str(self.paths.dir)], "area": "loop state deleted by the agent"})

    def _loop_profile(self) -> sandbox.Profile:
        L = self.loop_policy
        if self._gp is None:
            self._gp = sandbox.git_paths(self.workdir)
        return sandbox.loop_profile(self.workdir, L.sandbox_writable, L.sandbox_network, self.sbx_mode, L.sandbox_image,
                                    gp=self._gp, pid_namespace=L.sandbox_pid_namespace, objects=self._objects_dir(),
                                    allow=netbox.parse_allow(L.sandbox_network_allow),
                                    unix_sockets=L.sandbox_unix_sockets)

    def _objects_dir(self) -> Path:
        return self.paths.dir / "objects"

    def _adopt_objects(self, n: int) -> None:
        """The objects the sandboxed programs wrote, into the repository's store, each checked (healer/loop/objects.py)."""
        if self.sbx_mode == "none":
            return
        if self._gp is None:
            self._gp = sandbox.git_paths(self.workdir)
        gp = self._gp
        if gp is None:
            return
        refused = objects.adopt(self.workdir, self._objects_dir(), gp.common / "objects", self.paths.quarantine(n))
        if refused:
            self._event("loop.git_tampered", {"n": n, "phase": "objects", "paths": [f"objects/{r}" for r in refused][:200],
                                              "undone": True, "why": "content does not hash to its name: never stored"})
            self._note(n, f"## iteration {n}: forged git objects set aside (quarantine), never stored\n- "
                       + ", ".join(refused[:20]))

    def _run(self, argv: list[str], log: Path, what: str, **kw) -> procs.Completed:
        """procs.run, in the sandbox when there is one; a sandbox that did not start it raises SandboxFailed."""
        try:
            return sandbox.run(self._profile, argv, log, what, group=self.group, watchdog=self.dog, **kw)
        finally:
            self._watchdog_said(what)
            if self._profile is not None:
                self._adopt_objects(self._n)

    def _watchdog_said(self, what: str) -> None:
        """What the watchdog did during the program: a runner it found stopped (and resumed) is an event the
        fleet's supervisor sees; a program it had to kill itself, the deadline the runner could not keep."""
        said = self.dog.reports() if self.dog is not None else []
        stops = sum(1 for s in said if s == "stopped")
        if stops:
            self._event("loop.runner_stopped", {"n": self._n, "what": what, "times": stops, "pid": os.getpid()})
        for s in said:
            if s.startswith("killed "):
                self._event("loop.watchdog_killed", {"n": self._n, "what": what, "pid": int(s.split()[1])})

    def _note(self, n: int, text: str) -> None:
        self._append_own("progress.md", text + "\n\n", n)

    def _append_own(self, name: str, text: str, n: int) -> None:
        """Append to one of the loop's files at the top of the tree (healer/loop/ownfiles.py), never through what
        the agent put there instead: a link, a FIFO or a folder is set aside in the iteration's quarantine folder
        (`loop.own_file_set_aside`, nothing deleted) and the file begins anew."""
        path = self.workdir / name
        fd = ownfiles.open_append(path)
        if fd is None:
            what = ownfiles.what_is(path) or "not a plain file"
            saved = protect.set_aside(self.workdir, name, self.paths.quarantine(n), f"loop {self.st.run_id}: {name} was {what}",
                                     self.clock)
            self._event("loop.own_file_set_aside", {"n": n, "file": name, "was": what, "saved_as": saved})
            fd = ownfiles.open_append(path)
            if fd is None:
                raise errors.HealerError(f"{path}: {what} stands where the loop keeps its {name} and could not be set aside")
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(text)

    def _check_git(self, n: int, phase: str) -> None:
        """Undo what the agent (or the code the gates ran) changed in the git common directory."""
        self._gsnap_end = None
        before = getattr(self, "_gsnap", None)
        if before is None:
            return
        fleet = self.req.fleet_root is not None
        after = guard.git_capture(self.workdir, fleet=fleet)
        if after is None:
            return
        ch = guard.git_changes(before, after)
        if fleet and ch.refs:
            ch = guard.fleet_moves_dropped(self.workdir, before, ch)
        if not ch:
            self._gsnap_end = after
            self._put_branch_back(n, phase)
            return
        # in a fleet too: what healer's own parts move (merges, other loops' branches, fetches) is left out above
        undone = guard.git_revert(self.workdir, before, ch, self.paths.quarantine(n), self.st.run_id, n, move_refs=True)
        self._event("loop.git_tampered", {"n": n, "phase": phase, "paths": ch.paths(before),
                                          "refs": {k: list(v) for k, v in ch.refs.items()}, "undone": undone,
                                          "refs_moved_back": True})
        self._event("loop.outside_write", {"n": n, "sandbox": self.sbx_mode, "count": len(ch.files) + len(ch.refs),
                                           "paths": ch.paths(before)[:200], "area": "git"})
        self._note(n, f"## iteration {n}: git directory changed outside the branch ({phase}); undone\n- "
                   + ", ".join(ch.paths(before)[:20]))
        self._put_branch_back(n, phase)
        self._gsnap = self._gsnap_end = guard.git_capture(self.workdir, fleet=fleet)

    def _put_branch_back(self, n: int, phase: str) -> None:
        """The run's branch stays at its base until healer commits: commits the agent made (or a reset, a deleted
        branch) are kept under refs/healer/quarantine/<run>/<n>/agent and the branch goes back
        (`loop.agent_commits`). Their content is still in the working tree: measured and judged like any edit."""
        st = self.st
        if st.committed:
            return
        now = gitops.head(self.workdir)
        if now == st.start_head:
            return
        got = guard.set_commits_aside(self.workdir, st.start_head, now, f"refs/healer/quarantine/{st.run_id}/{n}/agent",
                                      spare=set(st.user_staged))
        self._last_tree = None  # the index moved with the agent's commit: measured again, not trusted
        self._event("loop.agent_commits", {"n": n, "phase": phase, **got})
        self._note(n, f"## iteration {n}: the agent's commits set aside ({phase}); the branch is back at its base\n- "
                   + ", ".join(f"{c['id'][:12]} {c['subject']}" for c in got["commits"][:10]))

    # -- the agent's stream: spend per turn, the cap within an iteration, the idle deadline ----------------
    def _tap(self, out, n: int) -> tap_mod.Tap:
        L = self.loop_policy
        self._agent_stopped = ""
        meter = usage.Meter(self.st.preset, usage.price_table(L.prices), L.agent.model, self._price_scale)
        base, cap = self.st.cost_usd, L.spend_cap_usd

        def on_turns(_turns) -> None:  # on the reader thread: wake the runner's wait when a turn crosses the cap
            if self._wake is not None and decide.over_cap(base + meter.usd, cap):
                with contextlib.suppress(OSError):
                    os.write(self._wake[1], b"\0")

        return tap_mod.Tap(out, meter, self.clock.monotonic, on_turns).start()

    def _codex_home(self, env: dict) -> str | None:
        """Codex's session files are read only from a CODEX_HOME given to the agent (a per-run one), never
        the user's default ~/.codex, where other sessions than this iteration's write."""
        return env.get("CODEX_HOME") if self.st.preset == "codex" else None

    def _agent_watch(self, tap: tap_mod.Tap, err_p: Path, env: dict, since: float) -> Callable[[], bool]:
        """procs.run's should_stop for the agent: a stop signal, the run's spend cap reached by a turn, or no
        output for loop.idle_timeout (stdout read by the tap, stderr by its file's size)."""
        L, clock = self.loop_policy, self.clock
        base, cap, idle = self.st.cost_usd, L.spend_cap_usd, L.idle_timeout
        codex_home = self._codex_home(env)
        seen = {"err": 0, "err_at": clock.monotonic(), "follow": 0.0}

        def watch() -> bool:
            if self._should_stop():
                return True
            now = clock.monotonic()
            if codex_home and now >= seen["follow"]:
                seen["follow"] = now + 1.0
                tap.follow_codex(codex_home, since)
            if decide.over_cap(base + tap.spent(), cap):
                self._agent_stopped = "spend_cap"
                return True
            try:
                size = os.stat(err_p).st_size
            except OSError:
                size = seen["err"]
            if size != seen["err"]:
                seen["err"], seen["err_at"] = size, now
            if decide.silent_for(now, max(tap.last_output, seen["err_at"]), idle):
                self._agent_stopped = "idle"
                self._silent_for = now - max(tap.last_output, seen["err_at"])
                return True
            return False

        return watch

    def _count_discarded(self, n: int) -> None:
        """An iteration that leaves no record (stopped by a signal, the sandbox failed, the runner died) still spent
        what its agent's turns reported: counted into the run from its agent.out, which is then renamed
        agent.out.counted (kept, and never counted twice when the iteration is redone)."""
        p = self.paths.iteration(n) / "agent.out"
        if not p.is_file():
            return
        L = self.loop_policy
        meter = usage.Meter(self.st.preset, usage.price_table(L.prices), L.agent.model)
        buf = usage.LineBuffer()
        for ln in buf.push(_read_tail(p, 64 << 20).encode()) + buf.flush():
            meter.feed(ln)
        with contextlib.suppress(OSError):
            os.replace(p, p.with_name("agent.out.counted"))
        if meter.usd > 0:
            self.st.cost_usd += meter.usd
            self._save()
            self._event("loop.spend_counted", {"n": n, "usd": round(meter.usd, 6), "turns": len(meter.turns),
                                               "why": "iteration discarded", "total_cost_usd": round(self.st.cost_usd, 6)})

    def _spend_events(self, n: int, meter: usage.Meter, stopped: str, res: procs.Completed) -> None:
        L, st = self.loop_policy, self.st
        tok = meter.tokens
        self._price_scale = usage.calibrate(meter, self._price_scale)
        self._usage = {"usd": round(meter.usd, 6), "estimated_usd": round(meter.estimated_usd, 6),
                       "reported_usd": meter.reported_usd, "turns": len(meter.turns), "model": meter.model,
                       "price_scale": round(self._price_scale, 4),
                       "tokens": {"input": tok.input, "output": tok.output, "cached": tok.cached,
                                  "cache_write": tok.cache_write}}
        if stopped == "spend_cap":
            spent = st.cost_usd + meter.usd
            self._event("loop.spend_cap_hit", {"n": n, "spent_usd": round(spent, 6), "cap_usd": L.spend_cap_usd,
                                               "iteration_usd": round(meter.usd, 6), "turns": len(meter.turns),
                                               "killed": list(res.killed)})
            self._note(n, f"## iteration {n}: agent stopped: its turns took the run to ${spent:.4f}, over the spend "
                       f"cap of ${L.spend_cap_usd:.2f} (loop.spend_cap_usd)")
        elif stopped == "idle":
            silent = getattr(self, "_silent_for", L.idle_timeout or 0.0)
            self._event("loop.agent_idle", {"n": n, "idle_timeout": L.idle_timeout, "silent_for": round(silent, 3),
                                            "killed": list(res.killed), "turns": len(meter.turns)})
            self._note(n, f"## iteration {n}: agent stopped: it printed nothing for {silent:.0f}s (loop.idle_timeout "
                       f"{L.idle_timeout:.0f}s): a hung CLI or an unreachable model endpoint")

    def _iterate_body(self, n: int) -> IterationRecord:
        st, L, clock = self.st, self.loop_policy, self.clock
        t0 = clock.monotonic()
        started_at = clock.now()
        deadline = t0 + L.iteration_timeout
        if L.run_timeout is not None:
            deadline = min(deadline, t0 + max(0.0, L.run_timeout - st.active_seconds))
        idir = self.paths.iteration(n)
        idir.mkdir(parents=True, exist_ok=True)
        before = self._last_tree or worktree.snapshot(self.workdir)
        self._before = before

        prev_log = _read_tail(self.paths.iteration(n - 1) / "gates.log", 256 * 1024) if n > 1 else ""
        prompt = agents.build_prompt(
            task=st.task, progress=_read_tail(self.workdir / "progress.md", 256 * 1024),
            gate_log=prev_log, lessons=_read_tail(self.workdir / "lessons.md", 64 * 1024), iteration=n,
            max_iterations=st.max_iterations, gates=[g.name for g in L.gates], protected=L.protected_paths,
            max_diff_lines=L.max_diff_lines, progress_lines=L.memory.progress_lines, gate_log_lines=L.memory.gate_log_lines)
        pf = idir / "prompt.md"
        pf.write_text(prompt)
        remaining_usd = (L.spend_cap_usd - st.cost_usd) if L.spend_cap_usd is not None else None
        argv = agents.render(self.spec, prompt_file=str(pf), workdir=str(self.workdir), iteration=n, prompt=prompt,
                             remaining_usd=remaining_usd)
        env = environ.for_programs(procs.environ(), L.env_pass)
        env.update({"HEALER_LOOP_RUN_ID": st.run_id, "HEALER_LOOP_ITERATION": str(n), "HEALER_PROMPT_FILE": str(pf),
                    "HEALER_WORKDIR": str(self.workdir)})
        h = agenthome.home(st.preset, self.paths.dir)
        if h is not None:  # the CLI's config home of this run, afresh: writable inside healer's read-only .healer/
            env.update(agenthome.seed(st.preset, h, procs.environ(), self.paths.iteration(n - 1) if n > 1 else idir))
            env.update(agenthome.inside_env(st.preset, procs.environ(), L, self.sbx_mode))
            if self._profile is not None and h.resolve() not in self._profile.rw_last:
                self._profile.rw_last.append(h.resolve())
        marker = os.urandom(16).hex()
        on_disk = protect.protected_on_disk(self.workdir, L.protected_paths)
        # kept on disk until the agent's step is compared: a runner killed in between finds it on resume
        self._on_disk = on_disk
        write_json_atomic(idir / UNCHECKED, {"protected_on_disk": on_disk})
        failpoints.hit(FP_BEFORE_AGENT)

        out_p, err_p = idir / "agent.out", idir / "agent.err"
        with open(out_p, "wb", buffering=0) as out, open(err_p, "wb") as err, \
                (open(pf, "rb") if agents.prompt_on_stdin(self.spec, argv) else open(os.devnull, "rb")) as stdin:
            tap = self._tap(out, n)

            def on_spawn(proc, tree) -> None:
                tap.close_writer_in_parent()  # the agent holds the pipe now: its tree's end is the stream's end
                st.inflight = {"n": n, "marker": marker, "pid": proc.pid, "pid_start": procs.mark(proc.pid)}
                # a plain overwrite of a small file (no rename): it survives a SIGKILL of this process
                with open(self.paths.agent, "w") as f:
                    f.write(json.dumps(st.inflight))

            try:
                res = self._run(argv, err_p, "the agent", cwd=self.workdir, timeout=max(0.0, deadline - clock.monotonic()), grace=L.kill_grace,
                                clock=clock, env=env, stdout=tap.writer, stderr=err, stdin=stdin,
                                should_stop=self._agent_watch(tap, err_p, env, started_at), **self._waiting(),
                                marker=marker, on_spawn=on_spawn, adopt_orphans=self.subreaper)
            except OSError as e:
                err.write(f"healer: cannot start agent {argv[0]!r}: {e}\n".encode())
                res = procs.Completed(127, False, [], 0.0)
            finally:
                tap.finish()
                tap.follow_codex(self._codex_home(env), started_at)
        failpoints.hit(FP_AFTER_AGENT)
        self._own_folders(idir)
        if self.stop_signal:
            raise _Interrupted
        out_text, err_text = _read_tail(out_p), _read_tail(err_p)
        why = None if res.timed_out else agents.start_failure(st.preset, res.exit_code, out_text, err_text)
        if why is not None:
            raise agenthome.AgentUnavailable(f"{st.preset} did not start: {why}")
        roots = [str(self.workdir)]
        meter = tap.meter
        cost = meter.usd  # every turn its stream reported, the kill at a deadline or a cap included
        stopped = self._agent_stopped
        self._spend_events(n, meter, stopped, res)
        said = meter.said()
        is_claude = decide.claude_result(out_text) is not None
        if meter.events and said:
            key = decide.output_key(said, roots)
        else:
            key = decide.output_key(out_text if is_claude else out_text + "\n" + err_text, roots)
        dup = st.outputs.get(key) if key else None

        wd = self.workdir
        self._check_git(n, "agent")
        quarantine = self.paths.quarantine(n)
        # a change too big to measure in time (a 6 GB file, 100,000 new files) is rolled back unread: scope drift
        big = gitops.oversize(wd, L.max_diff_lines, L.max_diff_bytes)
        if big is not None:
            count = protect.set_aside_fast(wd, before, big.paths, quarantine)
            self._event("loop.oversize", {"n": n, "why": big.why, "paths": big.paths[:50], "moved": count,
                                          "quarantine": str(quarantine / "oversize")})
            self._note(n, f"## iteration {n}: scope drift ({big.why}); {count} paths set aside unread")
        after = worktree.snapshot(wd)
        changed, lines, nbytes = gitops.diff_stat(wd, before, after)
        prot = [p for p in changed if protect.protected(p, L.protected_paths)]
        # and what git does not see there: files its ignore rules hide (the agent may write .gitignore too)
        prot += protect.hidden_changes(wd, after, on_disk, protect.protected_on_disk(wd, L.protected_paths), set(prot))
        reverted = protect.put_back(wd, before, prot, quarantine, f"loop {st.run_id} iteration {n}: protected path",
                                   clock) if prot else []
        self._checked(idir)
        if reverted:
            after = worktree.snapshot(wd)
            lines, nbytes = gitops.diff_size(wd, before, after)
        if big is not None:  # what the agent's change was, before it was set aside unread
            lines, nbytes = max(lines, big.lines), max(nbytes, big.size)
        drift = big is not None or lines > L.max_diff_lines or nbytes > L.max_diff_bytes
        self._diff_bytes = nbytes
        rolled = []
        if drift and big is None:
            why = (f"{lines} lines > {L.max_diff_lines}" if lines > L.max_diff_lines
                   else f"{nbytes} bytes > {L.max_diff_bytes}")
            rolled = protect.put_back(wd, before, gitops.changed_between(wd, before, after), quarantine,
                                     f"loop {st.run_id} iteration {n}: scope drift, {why}", clock)
        failpoints.hit(FP_BEFORE_GATES)

        gates, failing_log = self._gates(idir, deadline)
        if self.stop_signal:
            raise _Interrupted
        tree = worktree.snapshot(self.workdir)
        self._last_tree = tree
        sig, sig_text = (None, "")
        failed = next((g for g in gates if not g.passed), None)
        if failed is not None:
            sig, sig_text = decide.failure_signature(failed.name, failing_log, roots)
            if decide.silent_failure(failing_log, roots):
                # a gate that fails without a word says nothing to compare: no signature, so
                # a never-converging agent ends at the iteration cap (2), not as a stall (3)
                sig, sig_text = None, f"{failed.name}: {failed.outcome()}, no output"
        rec = IterationRecord(
            n=n, tree_hash=tree, state_hash=decide.state_hash(tree, gates), gates=tuple(gates), signature=sig,
            signature_text=sig_text, output_key=key, duplicate_of=dup, agent_exit=res.exit_code, timed_out=res.timed_out,
            killed=tuple(res.killed), cost_usd=cost, diff_lines=lines, scope_drift=drift,
            reverted=tuple(m.path for m in reverted), changed=tuple(changed[:200]),
            claimed_done=decide.claims_done((said if meter.events and said else out_text) + "\n" + err_text),
            stopped=stopped, tokens=meter.tokens.total, turns=len(meter.turns), started_at=started_at,
            duration=round(clock.monotonic() - t0, 4), day=day_of(started_at),
        )
        self._rolled = rolled
        self._reverted_moves = reverted
        return rec

    def _gates(self, idir: Path, deadline: float) -> tuple[list[GateResult], str]:
        L, clock = self.loop_policy, self.clock
        env = environ.for_programs(procs.environ(), L.env_pass)
        results: list[GateResult] = []
        combined: list[str] = []
        failing_log = ""
        for i, g in enumerate(L.gates, 1):
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                text = f"gate {g.name}: not run: iteration deadline passed"
                results.append(GateResult(g.name, None, skipped=True))
                combined.append(f"=== gate {g.name}: skipped (iteration deadline passed)\n")
                failing_log = text
                break
            log = idir / f"gate-{i}-{_safe(g.name)}.log"
            with open(log, "wb") as f:
                try:
                    res = self._run(g.run, log, f"gate {g.name}", cwd=self.workdir, timeout=min(g.timeout, remaining), grace=L.kill_grace,
                                    clock=clock, env=env, stdout=f, stderr=subprocess.STDOUT,
                                    should_stop=self._should_stop, adopt_orphans=self.subreaper, **self._waiting())
                except OSError as e:
                    f.write(f"healer: cannot start gate {g.name} ({g.run[0]!r}): {e}\n".encode())
                    res = procs.Completed(127, False, [], 0.0)
            if res.stopped:
                raise _Interrupted
            gr = GateResult(g.name, res.exit_code, timed_out=res.timed_out, elapsed=round(res.elapsed, 4))
            text = _read_tail(log)
            if gr.timed_out:
                text += f"\ngate {g.name}: timed out\n"
            results.append(gr)
            combined.append(f"=== gate {g.name}: {' '.join(g.run)} -> {gr.outcome()} in {res.elapsed:.2f}s\n{text}")
            if not gr.passed:
                failing_log = text
                break
        (idir / "gates.log").write_text("".join(c if c.endswith("\n") else c + "\n" for c in combined))
        return results, failing_log

    # -- records for humans and the event log -----------------------------------------
    def _report(self, rec: IterationRecord, verdict: Verdict) -> None:
        st, L = self.st, self.loop_policy
        gates_txt = ", ".join(f"{g.name} {g.outcome()}" for g in rec.gates)
        self._event("loop.iteration", {
            "n": rec.n, "state_hash": rec.state_hash, "tree_hash": rec.tree_hash,
            "gates": [{"name": g.name, "outcome": g.outcome(), "exit_code": g.exit_code, "elapsed": g.elapsed}
                      for g in rec.gates],
            "signature": rec.signature, "signature_text": rec.signature_text, "duration": rec.duration,
            "timed_out": rec.timed_out, "killed": list(rec.killed), "agent_exit": rec.agent_exit,
            "cost_usd": rec.cost_usd, "total_cost_usd": round(st.cost_usd, 6), "diff_lines": rec.diff_lines,
            "scope_drift": rec.scope_drift, "reverted": list(rec.reverted), "changed": list(rec.changed[:50]),
            "duplicate_of": rec.duplicate_of, "claimed_done": rec.claimed_done,
            "verdict": {"exit_code": verdict.exit_code, "reason": verdict.reason},
            "stopped": rec.stopped, "usage": self._usage, "ticket": os.environ.get("HEALER_TICKET"),
            "day": rec.day, "day_cost_usd": round(loop_state.daily_spend(self.workdir, rec.day) + rec.cost_usd, 6),
        })
        if rec.reverted:
            self._event("loop.protected_reverted", {"n": rec.n, "paths": list(rec.reverted),
                                                    "moves": [m.__dict__ for m in self._reverted_moves]})
        if rec.scope_drift:
            self._event("loop.scope_drift", {"n": rec.n, "diff_lines": rec.diff_lines, "cap": L.max_diff_lines,
                                             "diff_bytes": self._diff_bytes, "cap_bytes": L.max_diff_bytes,
                                             "rolled_back": [m.__dict__ for m in self._rolled]})
        if rec.duplicate_of is not None:
            self._event("loop.duplicate_output", {"n": rec.n, "same_as": rec.duplicate_of,
                                                  "policy": L.stall.duplicate_output})
        self._progress_entry(rec, verdict)
        if rec.n % L.checkpoint_every == 0 or not verdict.go_on:
            self._checkpoint(rec, verdict)
        flags = []
        if rec.timed_out:
            flags.append(f"agent killed at deadline ({len(rec.killed)} pids)")
        if rec.reverted:
            flags.append(f"reverted {len(rec.reverted)} protected")
        if rec.scope_drift:
            flags.append(f"scope drift {rec.diff_lines} lines / {self._diff_bytes} bytes, rolled back")
        if rec.duplicate_of is not None:
            flags.append(f"duplicate output of #{rec.duplicate_of}")
        if rec.stopped == "spend_cap":
            flags.append("agent stopped at the spend cap")
        elif rec.stopped == "idle":
            flags.append(f"agent stopped: silent for loop.idle_timeout ({L.idle_timeout:.0f}s)")
        if rec.cost_usd:
            flags.append(f"${st.cost_usd:.4f} spent")
        extra = (" · " + "; ".join(flags)) if flags else ""
        self.echo(f"iteration {rec.n}/{st.max_iterations}: {gates_txt} · state {rec.state_hash[:10]} · "
                  f"{rec.duration:.1f}s{extra}")

    def _progress_entry(self, rec: IterationRecord, verdict: Verdict) -> None:
        lines = [f"## iteration {rec.n} · run {self.st.run_id} · {iso(rec.started_at)}"]
        if rec.changed:
            shown = ", ".join(rec.changed[:10]) + (f" (+{len(rec.changed) - 10} more)" if len(rec.changed) > 10 else "")
            lines.append(f"- changed: {shown} ({rec.diff_lines} lines)")
        else:
            lines.append("- changed: nothing")
        if rec.reverted:
            lines.append(f"- reverted (protected paths, copies in quarantine): {', '.join(rec.reverted)}")
        if rec.scope_drift:
            lines.append(f"- scope drift: {rec.diff_lines} changed lines (cap {self.loop_policy.max_diff_lines}), "
                         f"{self._diff_bytes} bytes (cap {self.loop_policy.max_diff_bytes}); "
                         "the whole change was rolled back (copies in quarantine)")
        agent = f"exit {rec.agent_exit}" if rec.agent_exit is not None else "killed"
        if rec.timed_out:
            agent = f"killed at the iteration deadline ({len(rec.killed)} processes)"
        elif rec.stopped == "spend_cap":
            agent = f"stopped: its turns reached the spend cap (${self.st.cost_usd:.4f})"
        elif rec.stopped == "idle":
            agent = f"stopped: it printed nothing for {self.loop_policy.idle_timeout:.0f}s (loop.idle_timeout)"
        lines.append(f"- agent: {agent}" + (" · claimed done (only the gates decide)" if rec.claimed_done else ""))
        lines.append("- gates: " + ", ".join(f"{g.name} {g.outcome()}" for g in rec.gates))
        if rec.signature:
            lines.append(f"- failure: {rec.signature_text} [sig {rec.signature}]")
        if verdict.kind == "success":
            lines.append("- result: all gates green; the loop commits and stops")
        elif not verdict.go_on:
            lines.append(f"- result: loop stops: exit {verdict.exit_code} ({EXIT_WORDS.get(verdict.exit_code)}): {verdict.reason}")
        else:
            failed = next((g for g in rec.gates if not g.passed), None)
            nxt = f"make gate `{failed.name}` pass (see its log above)" if failed else "continue"
            lines.append(f"- next: {nxt}")
        self._append_own("progress.md", "\n".join(lines) + "\n\n", rec.n)

    def _checkpoint(self, rec: IterationRecord, verdict: Verdict) -> None:
        st = self.st
        decision = "continue" if verdict.go_on else f"exit {verdict.exit_code} ({EXIT_WORDS.get(verdict.exit_code)}): {verdict.reason}"
        text = (f"## Checkpoint after iteration {rec.n} of {st.max_iterations} · {iso(self.clock.now())}\n\n"
                f"- state hash: `{rec.state_hash}` (tree `{rec.tree_hash}`)\n"
                f"- gates: {', '.join(f'{g.name} {g.outcome()}' for g in rec.gates)}\n"
                f"- failure signature: {('`' + rec.signature + '` ' + rec.signature_text) if rec.signature else 'none'}\n"
                f"- stall counters: same state {decide.same_state_streak(st.history, st.baseline_tree)}"
                f"/{self.limits.same_state}, same failure {decide.same_failure_streak(st.history)}/{self.limits.same_failure}\n"
                f"- cost: ${st.cost_usd:.4f}" + (f" of ${self.limits.spend_cap_usd:.2f}" if self.limits.spend_cap_usd else "") + "\n"
                f"- decision: {decision}\n\n")
        with open(self.paths.checkpoints, "a") as f:
            f.write(text)
        self._event("loop.checkpoint", {"n": rec.n, "path": str(self.paths.checkpoints), "state_hash": rec.state_hash,
                                        "decision": decision})

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
        self._event("loop.ended", {"exit_code": code, "reason": reason, "iterations": len(st.history),
                                   "committed": st.committed, "cost_usd": round(st.cost_usd, 6)})
        self._beat(progress=False)
        self.echo(f"loop {st.run_id}: exit {code} ({EXIT_WORDS.get(code, '?')}): {reason}")
        return Outcome(st.run_id, code, reason, len(st.history), st.committed, self.paths.result)
