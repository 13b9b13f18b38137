"""The dispatcher's launch path: a planned launch, resume or replay becomes a worktree, an attempt and a running agent.

`AgentLauncher` is the Dispatcher's collaborator (healer/fleet/dispatcher.py) for it, given its store, policy, git and
process ports, runtime, clocks and identity: the ticket moves to in progress (several hosts: claimed first), its worktree is made or repaired (a
half-made one set aside, a stale index.lock moved aside; nothing deleted), the task file and the loop's argv are
written, the runtime starts the agent and the agent is registered, in that order, so a crash between any two
steps leaves what the next pass (healer/fleet/dispatch_reap.py: orphans, adoption) recognises.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from healer import conventions as cv
from healer import digest, failpoints, git, lifecycle, procs
from healer.clock import Clock
from healer.core import dispatch as core
from healer.core import endings
from healer.errors import StaleLease, host_trouble
from healer.files import write_atomic
from healer.fleet.dispatch_board import ACTOR, Identity, MainRef, TicketMover, agent_id_for, ours
from healer.fleet.ports import Git, Processes
from healer.fleet.runtime import LaunchSpec, Runtime
from healer.records import Agent, Attempt, Ticket, Worktree
from healer.store import keys
from healer.store.base import Store

if TYPE_CHECKING:
    from healer.policy.schema import Policy

FP_AFTER_LAUNCH = failpoints.declare("dispatch.after_launch", "healer/fleet/dispatch_launch.py: agent started and registered, before the launch event")

branch_for, worktree_for = cv.branch_for, cv.worktree_for
__all__ = ["ACTOR", "AgentLauncher", "agent_id_for", "ours", "snapshot_policy"]  # ACTOR, agent_id_for, ours: from here too


class AgentLauncher:
    """Carries out one planned launch, resume or replay: claim, worktree, task file, argv, start, register."""

    def __init__(self, store: Store, git: Git, processes: Processes, runtime: Runtime, policy: Policy, root: Path, *,
                 clock: Clock, real: Clock, me: Identity, main_ref: MainRef, mover: TicketMover, shared: str | None,
                 policy_path: Path | None) -> None:
        self.store = store
        self.git = git
        self.processes = processes
        self.runtime = runtime
        self.policy = policy
        self.root = root
        self.clock = clock
        self.real = real  # a lock set aside is named for the real time
        self.me = me
        self.main_ref = main_ref
        self.mover = mover
        self.shared = shared
        self.policy_path = policy_path
        self._snapshot: Path | None = None  # the policy snapshot loops are launched with (`_policy_file`)
        self._snapshot_said = False

    def launch(self, launch: core.Launch) -> bool:
        t = self.store.ticket(launch.ticket_id)
        if t.state not in (lifecycle.QUEUED, lifecycle.REVIEW):
            return False
        wt = worktree_for(self.root, t.id)
        branch = branch_for(t.id)
        now = self.clock.now()
        run_id = self._run_id(t, launch)
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
            created = self.git.add_worktree(self.root, wt, branch, self.main_ref())
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
            if not self.mover.move(t.id, lifecycle.IN_PROGRESS, launch.kind, expect=t.state):
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
            self.mover.move(t.id, lifecycle.QUEUED, f"launch failed: {e}", expect=lifecycle.IN_PROGRESS)
            self.store.append("dispatch.launch_failed", t.id, {"error": str(e), "argv": list(argv)})
            return False
        try:
            self.store.upsert_agent(Agent(
                id=agent_id, ticket_id=t.id, state="running", kind=h.kind, pid=h.pid, host=self.me.host, container=h.container,
                run_id=run_id, worktree=str(wt), started_at=now, heartbeat_at=now, progress_at=now,
                data={"launched_by": ACTOR, "attempt": att.id, "marker": h.marker, "launch": launch.kind, "log": str(log),
                      "head": att.head, "argv": list(argv), "dispatcher": self.me.holder, "machine": self.me.machine},
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

    def _run_id(self, t: Ticket, launch: core.Launch) -> str:
        """A resume continues its run (the plan names it); any other launch starts the ticket's next one."""
        if launch.kind == core.RESUME and launch.run_id:
            return launch.run_id
        return f"{t.id}-{len(self.store.attempts(t.id)) + 1:02d}"

    def _claim(self, t: Ticket, launch: core.Launch, wt: Path) -> tuple[Attempt, str] | None:
        """Several hosts: take the ticket and open its attempt in one transaction, the claim skipping a ticket another
        host's claim holds (PostgreSQL: FOR UPDATE SKIP LOCKED); None when another host was first. The ticket records
        which host holds it, so no other host's dispatcher calls it an orphan, and the leading supervisor knows whose
        it is if this host is lost."""
        head = self.git.rev(wt) if wt.is_dir() else self.git.rev(self.root, self.main_ref())
        with self.store.tx():
            if t.state == lifecycle.QUEUED:
                if self.store.claim_ticket(actor=ACTOR, among=[t.id], reason=launch.kind) is None:
                    return None
            elif not self.mover.move(t.id, lifecycle.IN_PROGRESS, launch.kind, expect=t.state):
                return None
            run_id = self._run_id(t, launch)
            self.store.set_ticket_data(t.id, host=self.me.host, machine=self.me.machine)
            att = self.store.add_attempt(t.id, launch.kind, run_id=run_id, head=head, host=self.me.host)
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
            self.mover.move(t.id, lifecycle.QUEUED, f"launch failed: {why}", expect=lifecycle.IN_PROGRESS)
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
        if wt.exists() and any(self.processes.busy([wt]).values()):
            self.store.append("dispatch.worktree_busy", tid, {"path": str(wt), "why": why})
            return False

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

        if procs.busy_pids(wt):
            return
        aside = lock.with_name(f"index.lock.stale-{int(self.real.now())}")
        lock.rename(aside)
        self.store.append("dispatch.stale_lock_moved", tid, {"path": str(lock), "to": str(aside),
                                                             "why": "left by an agent killed mid-commit"})

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
        """The policy the operator started this dispatcher with, as a content-addressed read-only snapshot
        (ROOT/.healer/policies/<sha256>.yaml): every loop it launches reads that, never ROOT/healer.yaml, which a
        merge or an agent could have changed since it started (issue 39). A loop refuses a snapshot that does not
        hash to its name. A new policy takes effect when the operator restarts the dispatcher (docs/fleet.md)."""
        if self._snapshot is not None and self._snapshot.is_file():
            return self._snapshot
        data = self.policy.model_dump(mode="json", by_alias=True)
        # runbooks as the fleet root names them (the loop derives the files it guards from these names)
        base = (self.policy_path or self.root / "healer.yaml").parent
        data["include_runbooks"] = [_root_relative(self.root, base, e) for e in data.get("include_runbooks") or []]
        text = yaml.safe_dump(data, sort_keys=False)
        path, fresh = snapshot_policy(self.root, text)
        self._snapshot = path
        if fresh or not self._snapshot_said:
            self.store.append("dispatch.policy", "", {"path": str(path), "sha256": path.stem,
                                                      "source": str(self.policy_path) if self.policy_path else None})
        self._snapshot_said = True
        return path

    def _argv(self, t: Ticket, launch: core.Launch, run_id: str, task: Path, wt: Path) -> list[str]:
        fleet = self.policy.fleet
        values = dict(python=sys.executable, policy=str(self._policy_file()), task_file=str(task), workdir=str(wt),
                      root=str(self.root), run_id=run_id, ticket=t.id)
        argv = [_subst(a, values) for a in fleet.loop_command]
        if list(fleet.loop_command[:2]) == ["{python}", "-m"]:
            # healer's own interpreter, and the worktree off its import path: `python -m healer` run in a tree that
            # holds a healer.py (or healer/) would run that file as the next loop, outside any sandbox (issue 39)
            argv.insert(1, "-P")
        if launch.kind == core.RESUME:
            argv += [_subst(a, values) for a in fleet.resume_args]
        return argv


_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def _subst(text: str, values: dict[str, str]) -> str:
    """Replace the known {placeholders} only; any other brace (a `python -c` snippet, JSON) stays as written."""
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), text)


def _root_relative(root: Path, base: Path, entry: str) -> str:
    p = (base / entry).resolve()
    try:
        return p.relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(p)


def snapshot_policy(root: Path, text: str) -> tuple[Path, bool]:
    """`text` as ROOT/.healer/policies/<its sha256>.yaml, read-only (renamed into place: whole or absent); whether
    it was written now. A file of that name that does not hold those bytes (set aside, never deleted) is rewritten."""
    raw = text.encode()
    name = digest.sha256(raw).hexdigest()
    folder = root / cv.POLICIES
    path = folder / f"{name}.yaml"
    try:
        if path.is_file() and not path.is_symlink() and digest.sha256(path.read_bytes()).hexdigest() == name:
            return path, False
    except OSError:
        pass
    folder.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(path):
        os.replace(path, folder / f"{name}.yaml.bad-{uuid.uuid4().hex[:8]}")
    write_atomic(path, text)
    os.chmod(path, 0o444)
    return path, True
