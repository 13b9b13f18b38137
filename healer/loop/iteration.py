"""One iteration of the governed loop: the agent's step in its sandbox, the checks on what it changed (protected
paths, the git directory, the diff cap), the gates, and the record of it (events, progress, checkpoint).

`Iteration` is the half of healer/loop/runner.py's Runner that runs one iteration; the Runner (the run's
start, its loop of iterations, the commit and the end) inherits it. Its methods use the run's state the Runner
set up (self.st, self.paths, self.loop_policy, self.spec, self.store) and its `_event`, `_save`,
`_should_stop` and `_waiting`.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from healer import endpoints, environ, errors, failpoints, gating, git, guarded, procs, sandbox
from healer.clock import day_of, iso
from healer.loop import agenthome, agents, decide, gitops, guard, objects, ownfiles, protect, usage, worktree
from healer.loop import state as loop_state
from healer.loop import tap as tap_mod
from healer.loop.decide import EXIT_WORDS, GateResult, IterationRecord, Verdict
from healer.loop.runhost import RunHost
from healer.loop.state import write_json_atomic

FP_BEFORE_AGENT = failpoints.declare("loop.before_agent", "healer/loop/iteration.py: prompt written, agent not started yet")
UNCHECKED = "protected-before.json"  # the protected paths on disk before the agent, until its step is compared
CHECKED = "protected-before.checked.json"
FP_AFTER_AGENT = failpoints.declare("loop.after_agent", "healer/loop/iteration.py: agent tree ended or killed, nothing reverted yet")
FP_BEFORE_GATES = failpoints.declare("loop.before_gates", "healer/loop/iteration.py: protected paths and diff cap applied, gates not run")
READ_CAP = 1 << 20  # bytes of agent output / gate log read back for hashing



class _Interrupted(Exception):
    pass


def _read_tail(path: Path, cap: int = READ_CAP) -> str:
    return ownfiles.read_tail(path, cap)  # never through a link an agent put in place


def _word(code: int | None) -> str | None:
    """The exit code's word (EXIT_WORDS); None for none."""
    return EXIT_WORDS.get(code) if code is not None else None


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:40] or "gate"


class Iteration(RunHost):
    """The Runner's iterations (see the module's docstring); what they use of the Runner is RunHost's list."""

    def _guard_protected(self, reference: str | None, why: str, on_disk: dict[str, tuple] | None = None) -> None:
        """Undo changes to protected paths made since `reference` (a snapshot) outside a
        complete iteration: an interrupted one, or the one in flight when the runner died. `on_disk`: the
        protected paths as the disk held them before that iteration's agent, when its step was not
        compared yet: what changed there where git cannot see it (ignored files) is undone too."""
        if not reference:
            return
        wd = self.workdir
        try:
            now = worktree.snapshot(wd)
            changed = gitops.changed_between(wd, reference, now)
        except git.GitError:  # the reference tree was pruned: nothing to compare with
            return
        prot = [p for p in changed if self._guarded(p)]
        if on_disk is not None:
            prot += [p for p in protect.hidden_changes(wd, now, on_disk, protect.protected_on_disk(wd, self._disk_pats),
                                                       set(prot)) if self._guarded(p)]
        if not prot:
            return
        n = len(self.st.history) + 1
        moves = protect.put_back(wd, reference, prot, self.paths.quarantine(n), f"loop {self.st.run_id}: protected path ({why})",
                                self.clock)
        self._last_tree = None
        self._event("loop.protected_reverted", {"n": None, "why": why, "paths": prot, "moves": [m.__dict__ for m in moves]})
        self._instruction_event(None, why, moves)
        self._append_own("progress.md", f"## {why} · run {self.st.run_id}\n- reverted (protected paths, copies in "
                                        f"quarantine): {', '.join(prot)}\n\n", n)

    # -- what healer guards whatever loop.protected_paths says (healer/guarded.py) -------------------------
    def _guard_sets(self, st) -> None:
        """The fleet's configuration in this tree, derived from the whole policy when the run has it (a new run, a
        resume given one), else as the run recorded it; the instruction files in force and their allowed ones."""
        pol, L, wd = self.req.policy, self.loop_policy, self.workdir
        if pol is not None:
            own, base = [], ""
            if st.policy_file:
                with contextlib.suppress(ValueError, OSError):
                    rel = Path(st.policy_file).resolve().relative_to(wd)
                    own, base = [rel.as_posix()], ("" if rel.parent == Path(".") else rel.parent.as_posix())
            st.guarded = own + guarded.config_paths(pol.model_dump(mode="json"), base, str(wd))
        elif st.guarded is None:  # a run recorded before healer derived it: its loop section is what it has
            st.guarded = guarded.config_paths({"loop": st.loop}, "", str(wd))
        self._prot = [*L.protected_paths, *st.guarded]
        self._instr = guarded.instruction_patterns(list(getattr(L, "instruction_files", None) or []))
        self._allow = list(getattr(L, "instruction_files_allow", None) or [])
        self._instr_pats, self._allow_pats = guarded.at_any_depth(self._instr), guarded.at_any_depth(self._allow)
        top = [e for e in guarded.top_entries(self._instr) if self._instruction(e)]
        # on disk: never the loop's own folder (.healer/ is the loop's state; git never sees it, the merge refuses it)
        self._disk_pats = [p for p in [*self._prot, *top] if not worktree.is_loop_file(p.rstrip("/"))]
        self._instr_top = top
        if st.instr_disk is None and not self.req.resume:
            st.instr_disk = protect.protected_on_disk(wd, top)

    def _guarded(self, path: str) -> bool:
        return protect.protected(path, self._prot) or self._instruction(path)

    def _instruction(self, path: str) -> bool:
        return protect.protected(path, self._instr_pats) and not protect.protected(path, self._allow_pats)

    def _instruction_event(self, n: int | None, phase: str, moves) -> None:
        got = [m for m in moves if self._instruction(m.path)]
        if got:
            self._event("loop.instruction_files_quarantined", {"n": n, "phase": phase, "paths": [m.path for m in got],
                                                               "moves": [m.__dict__ for m in got]})

    def _sweep_instructions(self, n: int, before: str) -> str:
        """Instruction files that differ from the run's base before the agent's step: what the gates' run wrote
        there (the agent's code), or what a runner killed before its check left. Put back from the base (new ones
        quarantined, nothing deleted) and reported: no agent starts with a hook or instructions planted for it.
        Returns the tree the agent starts from."""
        st, wd = self.st, self.workdir
        base = st.baseline_tree
        if not base:
            return before
        paths = [] if before == base else [p for p in gitops.changed_between(wd, base, before) if self._instruction(p)]
        if st.instr_disk is not None:
            start = {str(k): tuple(v) for k, v in st.instr_disk.items()}
            now = protect.protected_on_disk(wd, self._instr_top)
            if now != start:
                paths += [p for p in protect.hidden_changes(wd, before, start, now, set(paths)) if self._instruction(p)]
        if not paths:
            return before
        moves = protect.put_back(wd, base, paths, self.paths.quarantine(n),
                                 f"loop {st.run_id}: instruction file (before iteration {n})", self.clock)
        self._instruction_event(n, "before agent", moves)
        self._note(n, f"## iteration {n}: instruction files set aside before the agent (copies in quarantine)\n- "
                   + ", ".join(paths[:20]))
        self._last_tree = None
        return worktree.snapshot(wd)

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
                # no tmpfs of its own, but a temp dir of its own: the CLIs' scratch (Claude Code's
                # claude-0/, Codex's codex-*) stays in the tree's .healer/, kept as evidence, not in /tmp
                self._tmp = self.workdir / worktree.HEALER_DIR / "tmp" / f"{n:03d}"
                self._tmp.mkdir(parents=True, exist_ok=True)
                return self._iterate_body(n)
            with sandbox.Session(self._loop_profile()) as p:
                self._profile = p
                return self._iterate_body(n)
        finally:
            self._profile = None
            self._tmp = None
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

    def _program_env(self) -> dict[str, str]:
        """The agent's and the gates' environment: the policy's pass-list, and an unsandboxed iteration's temp dir."""
        env = environ.for_programs(procs.environ(), self.loop_policy.env_pass)
        if self._tmp is not None:
            env.update({"TMPDIR": str(self._tmp), "TMP": str(self._tmp), "TEMP": str(self._tmp)})
        return env

    def _loop_profile(self) -> sandbox.Profile:
        L = self.loop_policy
        if self._gp is None:
            self._gp = sandbox.git_paths(self.workdir)
        return sandbox.loop_profile(self.workdir, L.sandbox_writable, L.sandbox_network, self.sbx_mode, L.sandbox_image,
                                    gp=self._gp, pid_namespace=L.sandbox_pid_namespace, objects=self._objects_dir(),
                                    allow=endpoints.parse_allow(L.sandbox_network_allow),
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

    def _run(self, argv: list[str], log: Path, what: str, profile: sandbox.Profile | None | bool = True,
             **kw) -> procs.Completed:
        """procs.run, in the sandbox when there is one; a sandbox that did not start it raises SandboxFailed.
        `profile`: the run's (True), or one made for this program (a gate's, healer/gating.py)."""
        prof = self._profile if profile is True else profile or None
        try:
            return sandbox.run(prof, argv, log, what, group=self.group, watchdog=self.dog, **kw)
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
    def _tap(self, out, n: int) -> tuple[tap_mod.Tap, usage.Meter]:
        """The agent's stdout tap, and the meter it feeds."""
        L = self.loop_policy
        self._agent_stopped = ""
        meter = usage.Meter(self.st.preset, usage.price_table(L.prices), L.agent.model, self._price_scale)
        base, cap = self.st.cost_usd, L.spend_cap_usd

        def on_turns(_turns) -> None:  # on the reader thread: wake the runner's wait when a turn crosses the cap
            if self._wake is not None and decide.over_cap(base + meter.usd, cap):
                with contextlib.suppress(OSError):
                    os.write(self._wake[1], b"\0")

        return tap_mod.Tap(out, meter, self.clock.monotonic, on_turns, cap=L.output_cap).start(), meter

    def _truncated(self, n: int, stream: str, tap: tap_mod.Tap, path: Path) -> None:
        """A captured stream over loop.output_cap: its file kept the head and the tail (tap.Capped), said here."""
        cut = tap.truncated()
        if cut is not None:
            self._event("loop.output_truncated", {"n": n, "stream": stream, "path": str(path), **cut})

    def _codex_home(self, env: dict) -> str | None:
        """Codex's session files are read only from a CODEX_HOME given to the agent (a per-run one), never
        the user's default ~/.codex, where other sessions than this iteration's write."""
        return env.get("CODEX_HOME") if self.st.preset == "codex" else None

    def _agent_watch(self, tap: tap_mod.Tap, err_tap: tap_mod.Tap, env: dict, since: float) -> Callable[[], bool]:
        """procs.run's should_stop for the agent: a stop signal, the run's spend cap reached by a turn, the CLI
        still running loop.agent.after_result_grace after its final event, or no output for loop.idle_timeout
        (stdout and stderr, each read by its tap)."""
        L, clock = self.loop_policy, self.clock
        base, cap, idle = self.st.cost_usd, L.spend_cap_usd, L.idle_timeout
        codex_home = self._codex_home(env)
        seen = {"follow": 0.0}

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
            if decide.after_result(now, tap.result_at, L.agent.after_result_grace):
                self._agent_stopped = "after_result"
                self._result_for = now - (tap.result_at or now)
                return True
            last = max(tap.last_output, err_tap.last_output)
            if decide.silent_for(now, last, idle):
                self._agent_stopped = "idle"
                self._silent_for = now - last
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
        meter.estimate_open(len(_read_tail(self.paths.iteration(n) / "prompt.md")))
        with contextlib.suppress(OSError):
            os.replace(p, p.with_name("agent.out.counted"))
        if meter.usd > 0:
            self.st.cost_usd += meter.usd
            self._save()
            self._event("loop.spend_counted", {"n": n, "usd": round(meter.usd, 6), "turns": len(meter.turns),
                                               "why": "iteration discarded", "total_cost_usd": round(self.st.cost_usd, 6),
                                               "estimated": meter.estimated > 0, "estimated_turns": meter.estimated})

    def _spend_events(self, n: int, meter: usage.Meter, stopped: str, res: procs.Completed) -> None:
        L, st = self.loop_policy, self.st
        tok = meter.tokens
        self._price_scale = usage.calibrate(meter, self._price_scale)
        self._usage = {"usd": round(meter.usd, 6), "estimated_usd": round(meter.estimated_usd, 6),
                       "reported_usd": meter.reported_usd, "turns": len(meter.turns), "model": meter.model,
                       "price_scale": round(self._price_scale, 4),
                       # turns whose tokens were estimated from what streamed (usage.Meter.estimate_open): a kill mid-call
                       "estimated": meter.estimated > 0, "estimated_turns": meter.estimated,
                       "tokens": {"input": tok.input, "output": tok.output, "cached": tok.cached,
                                  "cache_write": tok.cache_write}}
        if stopped == "spend_cap":
            spent = st.cost_usd + meter.usd
            self._event("loop.spend_cap_hit", {"n": n, "spent_usd": round(spent, 6), "cap_usd": L.spend_cap_usd,
                                               "iteration_usd": round(meter.usd, 6), "turns": len(meter.turns),
                                               "killed": list(res.killed)})
            self._note(n, f"## iteration {n}: agent stopped: its turns took the run to ${spent:.4f}, over the spend "
                       f"cap of ${L.spend_cap_usd:.2f} (loop.spend_cap_usd)")
        elif stopped == "after_result":
            # a normal end: the CLI said its run was over and did not exit (Claude Code's background shells keep
            # it alive); what it left running was ended with it, by the run's cgroup / pid namespace. The gates
            # run as after any end: the final event itself decides nothing (docs/loop.md)
            after = getattr(self, "_result_for", L.agent.after_result_grace)
            self._event("loop.agent_ended_after_result", {"n": n, "preset": st.preset, "grace": L.agent.after_result_grace,
                                                          "after": round(after, 3), "killed": list(res.killed)})
            self._note(n, f"## iteration {n}: the agent's CLI reported its result and was still running {after:.0f}s "
                       f"later (loop.agent.after_result_grace): it and what it left running were ended; the gates judge")
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
        before = self._sweep_instructions(n, self._last_tree or worktree.snapshot(self.workdir))
        self._before = before

        prev_log = _read_tail(self.paths.iteration(n - 1) / "gates.log", 256 * 1024) if n > 1 else ""
        prompt = agents.build_prompt(
            task=st.task, progress=_read_tail(self.workdir / "progress.md", 256 * 1024),
            gate_log=prev_log, lessons=_read_tail(self.workdir / "lessons.md", 64 * 1024), iteration=n,
            max_iterations=st.max_iterations, gates=[g.name for g in L.gates], protected=L.protected_paths,
            max_diff_lines=L.max_diff_lines, progress_lines=L.memory.progress_lines, gate_log_lines=L.memory.gate_log_lines,
            guarded=(st.guarded or [])[:12])
        pf = idir / "prompt.md"
        pf.write_text(prompt)
        remaining_usd = (L.spend_cap_usd - st.cost_usd) if L.spend_cap_usd is not None else None
        argv = agents.render(self.spec, prompt_file=str(pf), workdir=str(self.workdir), iteration=n, prompt=prompt,
                             remaining_usd=remaining_usd)
        env = self._program_env()
        env.update({"HEALER_LOOP_RUN_ID": st.run_id, "HEALER_LOOP_ITERATION": str(n), "HEALER_PROMPT_FILE": str(pf),
                    "HEALER_WORKDIR": str(self.workdir)})
        h = agenthome.home(st.preset, self.paths.dir)
        if h is not None:  # the CLI's config home of this run, afresh: writable inside healer's read-only .healer/
            env.update(agenthome.seed(st.preset, h, procs.environ(), self.paths.iteration(n - 1) if n > 1 else idir))
            env.update(agenthome.inside_env(st.preset, procs.environ(), L, self.sbx_mode))
            if self._profile is not None and h.resolve() not in self._profile.rw_last:
                self._profile.rw_last.append(h.resolve())
        marker = os.urandom(16).hex()
        on_disk = protect.protected_on_disk(self.workdir, self._disk_pats)
        # kept on disk until the agent's step is compared: a runner killed in between finds it on resume
        self._on_disk = on_disk
        write_json_atomic(idir / UNCHECKED, {"protected_on_disk": on_disk})
        failpoints.hit(FP_BEFORE_AGENT)

        out_p, err_p = idir / "agent.out", idir / "agent.err"
        with open(out_p, "wb", buffering=0) as out, open(err_p, "wb", buffering=0) as err, \
                (open(pf, "rb") if agents.prompt_on_stdin(self.spec, argv) else open(os.devnull, "rb")) as stdin:
            tap, meter = self._tap(out, n)
            err_tap = tap_mod.Tap(err, None, clock.monotonic, cap=L.output_cap, name="agent-stderr").start()

            def on_spawn(proc, tree) -> None:
                tap.close_writer_in_parent()  # the agent holds the pipe now: its tree's end is the stream's end
                st.inflight = {"n": n, "marker": marker, "pid": proc.pid, "pid_start": procs.mark(proc.pid)}
                # a plain overwrite of a small file (no rename): it survives a SIGKILL of this process
                with open(self.paths.agent, "w") as f:
                    f.write(json.dumps(st.inflight))

            try:
                res = self._run(argv, err_p, "the agent", cwd=self.workdir, timeout=max(0.0, deadline - clock.monotonic()), grace=L.kill_grace,
                                clock=clock, env=env, stdout=tap.writer, stderr=err_tap.writer, stdin=stdin,
                                should_stop=self._agent_watch(tap, err_tap, env, started_at), **self._waiting(),
                                marker=marker, on_spawn=on_spawn, adopt_orphans=self.subreaper,
                                drain=err_tap.sync)
            except OSError as e:
                err_tap.sync()
                err.write(f"healer: cannot start agent {argv[0]!r}: {e}\n".encode())
                res = procs.Completed(127, False, [], 0.0)
            finally:
                tap.finish()
                err_tap.finish()
                tap.follow_codex(self._codex_home(env), started_at)
        self._truncated(n, "agent stdout", tap, out_p)
        self._truncated(n, "agent stderr", err_tap, err_p)
        failpoints.hit(FP_AFTER_AGENT)
        self._own_folders(idir)
        if self.stop_signal:
            raise _Interrupted
        out_text, err_text = _read_tail(out_p), _read_tail(err_p)
        meter.estimate_open(len(prompt))  # a call killed mid-stream (or never ending) counts what streamed, not $0
        if st.preset in agents.CLI_PRESETS and meter.endpoint_down and worktree.snapshot(self.workdir) == before:
            # the model never answered, so nothing the agent decided ran: the CLI's own stream (no tool of the
            # agent's wrote it) and an unchanged tree are the evidence; counted by no stall or same-failure rule
            self._model_down = {"n": n, "preset": st.preset, "errors": meter.api_errors, "last": meter.api_error,
                                "timed_out": res.timed_out, "stopped": self._agent_stopped, "agent_exit": res.exit_code}
            raise agenthome.ModelUnavailable(f"{st.preset}: model endpoint unavailable ({meter.api_errors} failed "
                                             f"requests, last: {meter.api_error or '?'})")
        why = None if res.timed_out else agents.start_failure(st.preset, res.exit_code, out_text, err_text)
        if why is not None:
            raise agenthome.AgentUnavailable(f"{st.preset} did not start: {why}")
        roots = [str(self.workdir)]
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
        prot = [p for p in changed if self._guarded(p)]
        # and what git does not see there: files its ignore rules hide (the agent may write .gitignore too)
        prot += [p for p in protect.hidden_changes(wd, after, on_disk, protect.protected_on_disk(wd, self._disk_pats),
                                                   set(prot)) if self._guarded(p)]
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
        env = self._program_env()
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
            prep = self._prepare_gate(g, i, idir, env)
            cap = None
            with open(log, "wb", buffering=0) as f:
                if prep.report is not None:
                    f.write(f"healer: {prep.note}\n".encode())
                if prep.refused:
                    f.write(f"healer: {prep.refused}\n".encode())
                if prep.refused:
                    res = procs.Completed(None, False, [], 0.0)
                else:
                    cap = tap_mod.Tap(f, None, clock.monotonic, cap=L.output_cap, name="gate-output").start()
                    try:
                        res = self._run(prep.argv, log, f"gate {g.name}", cwd=self.workdir, timeout=min(g.timeout, remaining),
                                        grace=L.kill_grace, clock=clock, env=prep.env, stdout=cap.writer,
                                        stderr=subprocess.STDOUT, should_stop=self._should_stop,
                                        adopt_orphans=self.subreaper, profile=gating.confine(self._profile, prep),
                                        **self._waiting(), drain=cap.sync)
                    except OSError as e:
                        cap.sync()
                        f.write(f"healer: cannot start gate {g.name} ({g.run[0]!r}): {e}\n".encode())
                        res = procs.Completed(127, False, [], 0.0)
                    finally:
                        cap.finish()
                judged = prep.refused or ""
                if not prep.refused and not res.timed_out and not res.stopped:
                    ok, why = gating.judge(prep, self.workdir, res.exit_code)
                    if prep.report is not None or ok != (res.exit_code == 0):
                        f.write(f"healer: gate {g.name}: {why}\n".encode())
                    judged = "" if ok or res.exit_code != 0 else why
            if cap is not None:
                self._truncated(self._n, f"gate {g.name}", cap, log)
            if res.stopped:
                raise _Interrupted
            gr = GateResult(g.name, res.exit_code, timed_out=res.timed_out, elapsed=round(res.elapsed, 4), judged=judged)
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

    def _prepare_gate(self, g, i: int, idir: Path, env: dict[str, str]) -> gating.Prepared:
        """The gate as healer runs it (healer/gating.py): its files compared with the run's base, pytest's argv
        and report. The base: the commit the run started on (its tree with --allow-dirty, as the commit's rule)."""
        st, L = self.st, self.loop_policy
        base = st.baseline_tree if st.allow_dirty else st.start_head
        try:
            return gating.prepare(list(g.run), self.workdir, base, list(L.protected_paths), idir / f"gate-{i}", env,
                                  report=g.report, extra_files=list(L.gate_config), name=g.name)
        except (git.GitError, OSError) as e:
            return gating.Prepared(argv=list(g.run), env=env, refused=f"gate {g.name}: not run: cannot read the base's "
                                                                       f"gate files: {e}")

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
            self._instruction_event(rec.n, "agent", self._reverted_moves)
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
        elif rec.stopped == "after_result":
            flags.append(f"agent ended after its result ({len(rec.killed)} processes left running)")
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
        elif rec.stopped == "after_result":
            agent = f"ended after its result: still running {self.loop_policy.agent.after_result_grace:.0f}s later ({len(rec.killed)} processes)"
        lines.append(f"- agent: {agent}" + (" · claimed done (only the gates decide)" if rec.claimed_done else ""))
        lines.append("- gates: " + ", ".join(f"{g.name} {g.outcome()}" for g in rec.gates))
        if rec.signature:
            lines.append(f"- failure: {rec.signature_text} [sig {rec.signature}]")
        if verdict.kind == "success":
            lines.append("- result: all gates green; the loop commits and stops")
        elif not verdict.go_on:
            lines.append(f"- result: loop stops: exit {verdict.exit_code} ({_word(verdict.exit_code)}): {verdict.reason}")
        else:
            failed = next((g for g in rec.gates if not g.passed), None)
            nxt = f"make gate `{failed.name}` pass (see its log above)" if failed else "continue"
            lines.append(f"- next: {nxt}")
        self._append_own("progress.md", "\n".join(lines) + "\n\n", rec.n)

    def _checkpoint(self, rec: IterationRecord, verdict: Verdict) -> None:
        st = self.st
        decision = "continue" if verdict.go_on else f"exit {verdict.exit_code} ({_word(verdict.exit_code)}): {verdict.reason}"
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
