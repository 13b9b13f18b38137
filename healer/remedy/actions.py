"""The remediation executor: the only code that changes the fleet on the healer's behalf.

Theory of operation. Every registered action (healer/actions/, `ActionSpec`) runs
the same path, whoever asks (the supervisor, the MCP repair server, a game day):

    refuse?  whitelist, policy `allowed`, .healer/HALT / observe_only, target
             confined to the fleet root, per-action rate limit, per-ticket quiet period
    journal  plan_intent                              -> failpoint remedy.after_intent
    check    preconditions again, on FRESH state      -> aborted when they no longer hold
    begin    set_intent(begun)                        -> failpoint remedy.after_begun
    effect   the action, idempotent step by step      -> failpoint remedy.after_effect
    verify   read the world back                      -> set_intent(done | aborted)
                                                       -> failpoint remedy.after_done

Every outcome is an event: `remedy.done`, `remedy.refused`, `remedy.aborted`,
`remedy.failed` (reason in the payload). `recover()` finishes or rolls back the
intents a dead process left behind: a `planned` one never acted and is rolled back
(aborted); a `begun` one is verified, and if its effect is not in place it is checked
again and completed. Each effect is idempotent, so finishing one twice is harmless.

Handlers are small (check, apply, verify) and share nothing but the Context. Each
action's spec (healer/actions/<name>.py) names its handler here; the executor reads
it from the registry (`handler()`), so a registered spec is all an action needs.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healer import actions as registry
from healer import failpoints, lifecycle, procs, switches
from healer.actions.spec import Abort, Handler, Refuse, Target
from healer.clock import Clock
from healer.core.model import PlannedAction
from healer.errors import HealerError, NotFound
from healer.fleet.snapshot import HOST, ended_with, handle_of, liveness
from healer.realpath import Resolver
from healer.remedy import limiter
from healer.remedy import quarantine as qmod
from healer.remedy.paths import UnsafePath, confine, relative
from healer.store import keys

FP_AFTER_INTENT = failpoints.declare("remedy.after_intent", "healer/remedy/actions.py: intent planned, preconditions not yet re-checked")
FP_AFTER_BEGUN = failpoints.declare("remedy.after_begun", "healer/remedy/actions.py: intent begun, effect not yet applied")
FP_AFTER_EFFECT = failpoints.declare("remedy.after_effect", "healer/remedy/actions.py: effect applied, not yet verified or journaled done")
FP_AFTER_DONE = failpoints.declare("remedy.after_done", "healer/remedy/actions.py: intent journaled done or aborted")

DONE, REFUSED, ABORTED, FAILED = "done", "refused", "aborted", "failed"
HALT_FILE = ".healer/HALT"
# settings shared with the dispatcher (healer/fleet/dispatcher.py keeps the same names)
PAUSED_BY_HEALER = "healer"
NEEDS_HUMAN_LABEL = "needs-human"
WORKTREES_DIR = ".healer/worktrees"  # the dispatcher's (healer/fleet/dispatcher.py: worktree_for)


@dataclass
class Context:
    root: Path
    store: Any
    policy: Any
    clock: Clock
    runtime: Any = None  # healer.fleet.runtime.Runtime | None
    actor: str = "supervisor"
    batch: str | None = None  # actions of one batch (one tick, one repair run) are one attempt on a ticket
    host: str = HOST
    processes: Any = None  # healer.fleet.ports.Processes (the process table); None: this machine's
    git: Any = None  # healer.fleet.ports.Git; None: this machine's (healer.git)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()

    def busy_pids(self, path: Path) -> list[int]:
        """Processes with a cwd or an open file inside `path`."""
        if self.processes is None:
            return procs.busy_pids(path)
        p = Path(path).resolve()
        return list(self.processes.busy([p]).get(p, ()))

    def now(self) -> float:
        return self.clock.now()

    def repo(self):
        """The Git port the actions use (the simulated world's, or this machine's git)."""
        if self.git is None:
            from healer.fleet.ports import REAL

            self.git = REAL.git
        return self.git

    def halted(self) -> str | None:
        if (self.root / HALT_FILE).exists():
            return f"halted: {HALT_FILE} exists (observe-only)"
        if self.policy.remediation.observe_only:
            return "halted: policy remediation.observe_only is true"
        return None


@dataclass(frozen=True)
class Outcome:
    status: str  # done | refused | aborted | failed
    reason: str
    intent_id: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == DONE


# -- helpers ----------------------------------------------------------------------

def _ticket(ctx: Context, tid: str):
    try:
        return ctx.store.ticket(tid)
    except NotFound as e:
        raise Abort(f"no ticket {tid!r}") from e


def _live_agents(ctx: Context, tid: str, *, exclude: str | None = None) -> list[tuple[str, bool | None]]:
    """Agents on `tid` that are alive or cannot be proven dead (a destructive action treats unknown as alive)."""
    out = []
    for a in ctx.store.agents(states=("running",), ticket_id=tid):
        if a.id == exclude:
            continue
        alive, _ = liveness(a, ctx.runtime, ctx.host)
        if alive is not False:
            out.append((a.id, alive))
    return out


def _no_live_agent(ctx: Context, tid: str, *, exclude: str | None = None) -> None:
    live = _live_agents(ctx, tid, exclude=exclude)
    if live:
        desc = ", ".join(f"{a} ({'alive' if al else 'liveness unknown'})" for a, al in live)
        raise Abort(f"{tid} has a live agent: {desc}")


def _not_reaped(ctx: Context, tid: str) -> None:
    """Reap before you judge: an agent that ended with an exit status or a result is the dispatcher's to record."""
    for a in ctx.store.agents(states=("running",), ticket_id=tid):
        alive, _ = liveness(a, ctx.runtime, ctx.host)
        if alive is False:
            code = ended_with(a, ctx.runtime)
            if code is not None:
                raise Abort(f"agent {a.id} ended with exit {code}; the dispatcher records it (it is not lost)")


def _mark_dead_agents(ctx: Context, tid: str) -> list[str]:
    """Agents the store still calls running but that are gone without a word: record them as lost (bookkeeping only)."""
    lost = []
    for a in ctx.store.agents(states=("running",), ticket_id=tid):
        alive, _ = liveness(a, ctx.runtime, ctx.host)
        if alive is False and ended_with(a, ctx.runtime) is None:
            ctx.store.update_agent(a.id, state="lost", ended_at=ctx.now())
            lost.append(a.id)
    return lost


def _requeue(ctx: Context, tid: str, reason: str, *, resume: bool, agent=None) -> dict:
    lost = _mark_dead_agents(ctx, tid)
    if resume:
        data: dict[str, Any] = {"resume": True}
        if agent is not None:
            data.update(resume_worktree=agent.worktree, resume_run=agent.run_id, resume_agent=agent.id)
        ctx.store.set_ticket_data(tid, **data)
    t = ctx.store.ticket(tid)
    if t.state == lifecycle.IN_PROGRESS:
        ctx.store.move_ticket(tid, lifecycle.QUEUED, actor=ctx.actor, reason=reason, expect=lifecycle.IN_PROGRESS)
    return {"lost_agents": lost, "resume": resume}


def _ticket_target(ctx: Context, subject: str, params: dict) -> Target:
    try:
        ctx.store.ticket(subject)
    except NotFound as e:
        raise Refuse(f"no ticket {subject!r}") from e
    return Target("", subject, params, ticket=subject)


def _agent_target(ctx: Context, subject: str, params: dict) -> Target:
    try:
        a = ctx.store.agent(subject)
    except NotFound:
        # a ticket id names its most recent agent
        cands = ctx.store.agents(ticket_id=subject)
        if not cands:
            raise Refuse(f"no agent (or ticket with an agent) {subject!r}") from None
        a = cands[-1]
    return Target("", subject, params, ticket=a.ticket_id, agent=a.id)


def _path_target(ctx: Context, subject: str, params: dict) -> Target:
    try:
        p = confine(ctx.root, subject)
    except UnsafePath as e:
        raise Refuse(str(e)) from e
    return Target("", subject, params, path=p)


# -- close_dead_ticket --------------------------------------------------------------

def _close_check(ctx: Context, t: Target) -> None:
    tk = _ticket(ctx, t.ticket)
    if tk.state == lifecycle.CLOSED:
        raise Abort(f"{t.ticket} is already closed")
    _expect(tk, t)
    _no_live_agent(ctx, t.ticket)


def _expect(tk, t: Target) -> None:
    want = t.params.get("expect")
    if want and tk.state != want:
        raise Abort(f"{tk.id} is {tk.state} now, not {want} as when it was planned")


def _close_apply(ctx: Context, t: Target, intent: int) -> dict:
    tk = ctx.store.ticket(t.ticket)
    if tk.state != lifecycle.CLOSED:
        # compare-and-set on the state it was judged in, not the one read now: a dispatcher that finished its merge
        # between the check and this move (review -> done, e.g. a store restart between the merge's two steps) wins,
        # and the intent aborts instead of closing a done ticket (pg-restarts-real found it)
        _expect(tk, t)
        _mark_dead_agents(ctx, t.ticket)
        ctx.store.move_ticket(t.ticket, lifecycle.CLOSED, actor=ctx.actor, reason=t.params.get("why", "dead ticket"),
                              expect=t.params.get("expect") or tk.state)
    return {"from": tk.state}


def _close_verify(ctx: Context, t: Target) -> bool:
    return ctx.store.ticket(t.ticket).state == lifecycle.CLOSED


# -- drop_label ---------------------------------------------------------------------

def _label_resolve(ctx: Context, subject: str, params: dict) -> Target:
    if not params.get("label"):
        raise Refuse("drop_label needs params.label")
    return _ticket_target(ctx, subject, params)


def _label_check(ctx: Context, t: Target) -> None:
    label = t.params["label"]
    tk = _ticket(ctx, t.ticket)
    if label not in tk.labels:
        raise Abort(f"{t.ticket} no longer has label {label!r}")
    seen = t.params.get("added_at")
    if seen is not None and abs(float(tk.labels[label]) - float(seen)) > 1e-6:
        raise Abort(f"{t.ticket}: label {label!r} was added again since it was judged stale")


def _label_apply(ctx: Context, t: Target, intent: int) -> dict:
    removed = ctx.store.unlabel(t.ticket, t.params["label"], actor=ctx.actor)
    return {"removed": removed}


def _label_verify(ctx: Context, t: Target) -> bool:
    return t.params["label"] not in ctx.store.ticket(t.ticket).labels


# -- requeue_ticket -----------------------------------------------------------------

def _requeue_check(ctx: Context, t: Target) -> None:
    tk = _ticket(ctx, t.ticket)
    if tk.state != lifecycle.IN_PROGRESS:
        raise Abort(f"{t.ticket} is {tk.state}, not in_progress")
    _no_live_agent(ctx, t.ticket)
    _not_reaped(ctx, t.ticket)


def _requeue_apply(ctx: Context, t: Target, intent: int) -> dict:
    return _requeue(ctx, t.ticket, t.params.get("why", "requeue: no live agent"), resume=bool(t.params.get("resume", False)))


def _requeue_verify(ctx: Context, t: Target) -> bool:
    return ctx.store.ticket(t.ticket).state == lifecycle.QUEUED


# -- unblock_ticket -----------------------------------------------------------------

def _unblock_check(ctx: Context, t: Target) -> None:
    """Still blocked, and still nothing blocks it: its blockers done or closed, no wait label, no rejected proposal
    (a ticket the dispatcher blocked after its replays ran out is a human's), no live agent."""
    tk = _ticket(ctx, t.ticket)
    if tk.state != lifecycle.BLOCKED:
        raise Abort(f"{t.ticket} is {tk.state}, not blocked")
    wait = (set(ctx.policy.fleet.wait_labels) | set(ctx.policy.health.stale_labels)) & set(tk.labels)
    if wait:
        raise Abort(f"{t.ticket} carries wait label(s) {', '.join(sorted(wait))}")
    for b in tk.blocked_by:
        try:
            bt = ctx.store.ticket(b)
        except NotFound:
            raise Abort(f"{t.ticket} is blocked by {b}, which is not on the board") from None
        if bt.state not in lifecycle.TERMINAL:
            raise Abort(f"{t.ticket} is still blocked by {b} ({bt.state})")
    if any(p.state == "rejected" for p in ctx.store.proposals(t.ticket)):
        raise Abort(f"{t.ticket} had a proposal rejected: blocked after its replays, a human's decision")
    _no_live_agent(ctx, t.ticket)


def _unblock_apply(ctx: Context, t: Target, intent: int) -> dict:
    ctx.store.move_ticket(t.ticket, lifecycle.QUEUED, actor=ctx.actor, expect=lifecycle.BLOCKED,
                          reason=t.params.get("why", "unblocked: nothing blocks it any more"))
    return {"to": lifecycle.QUEUED}


def _unblock_verify(ctx: Context, t: Target) -> bool:
    return ctx.store.ticket(t.ticket).state == lifecycle.QUEUED


# -- resume_agent -------------------------------------------------------------------

def _resume_check(ctx: Context, t: Target) -> None:
    a = ctx.store.agent(t.agent)
    alive, _ = liveness(a, ctx.runtime, ctx.host)
    if alive is None:
        raise Abort(f"cannot tell whether agent {a.id} is alive; not resuming over it")
    if alive:
        raise Abort(f"agent {a.id} is alive")
    if a.ticket_id is None:
        raise Abort(f"agent {a.id} has no ticket")
    code = ended_with(a, ctx.runtime)
    if code is not None:
        raise Abort(f"agent {a.id} ended with exit {code}; the dispatcher records it (it is not lost)")
    # an agent that just exited is the dispatcher's to reap (it records the exit and resumes by itself);
    # the supervisor steps in only when that has not happened within two dispatcher periods
    grace = 2 * max(ctx.policy.fleet.dispatch_tick, ctx.policy.fleet.heartbeat)
    last = max(a.heartbeat_at or 0.0, a.started_at or 0.0)
    if ctx.now() - last < grace:
        raise Abort(f"agent {a.id} was seen {round(ctx.now() - last)}s ago; the dispatcher gets {round(grace)}s to reap it first")
    tk = _ticket(ctx, a.ticket_id)
    if tk.state != lifecycle.IN_PROGRESS:
        raise Abort(f"{tk.id} is {tk.state}, not in_progress")
    _no_live_agent(ctx, a.ticket_id, exclude=a.id)


def _resume_apply(ctx: Context, t: Target, intent: int) -> dict:
    a = ctx.store.agent(t.agent)
    return _requeue(ctx, a.ticket_id, f"resume after agent {a.id} died", resume=True, agent=a)


def _resume_verify(ctx: Context, t: Target) -> bool:
    tk = ctx.store.ticket(t.ticket)
    return tk.state == lifecycle.QUEUED and bool(tk.data.get("resume"))


# -- stop_agent ---------------------------------------------------------------------

def _wants_resume(t: Target) -> bool:
    return bool(t.params.get("resume", t.params.get("mark_for_resume", True)))


def _stop_check(ctx: Context, t: Target) -> None:
    a = ctx.store.agent(t.agent)
    alive, _ = liveness(a, ctx.runtime, ctx.host)
    if alive is None:
        raise Abort(f"cannot tell whether agent {a.id} is alive (another host or runtime error)")
    if alive is False:
        pending = (_wants_resume(t) and a.ticket_id
                   and ctx.store.ticket(a.ticket_id).state == lifecycle.IN_PROGRESS)
        if not pending:
            raise Abort(f"agent {a.id} is already stopped")


def _stop_apply(ctx: Context, t: Target, intent: int) -> dict:
    a = ctx.store.agent(t.agent)
    alive, _ = liveness(a, ctx.runtime, ctx.host)
    grace = ctx.policy.loop.kill_grace
    if alive:
        if ctx.runtime is not None and getattr(ctx.runtime, "kind", a.kind) == a.kind:
            ctx.runtime.stop(handle_of(a), grace)
        elif a.kind == "process" and a.pid:
            procs.ProcessTree(a.pid, (a.data or {}).get("marker")).kill(grace, ctx.clock)
        else:
            raise HealerError(f"no runtime can stop a {a.kind} agent here")
    if a.state == "running":
        ctx.store.update_agent(a.id, state="stopped", ended_at=ctx.now())
    detail: dict[str, Any] = {"was_alive": bool(alive)}
    if _wants_resume(t) and a.ticket_id and ctx.store.ticket(a.ticket_id).state == lifecycle.IN_PROGRESS \
            and not _live_agents(ctx, a.ticket_id, exclude=a.id):
        detail.update(_requeue(ctx, a.ticket_id, f"agent {a.id} stopped ({t.params.get('why', 'stuck')}); resume", resume=True, agent=a))
    return detail


def _stop_verify(ctx: Context, t: Target) -> bool:
    a = ctx.store.agent(t.agent)
    alive, _ = liveness(a, ctx.runtime, ctx.host)
    if alive is not False:
        return False
    if _wants_resume(t) and a.ticket_id:
        return ctx.store.ticket(a.ticket_id).state != lifecycle.IN_PROGRESS
    return True


# -- quarantine_file ----------------------------------------------------------------

def _q_resolve(ctx: Context, subject: str, params: dict) -> Target:
    """One file (the subject) or several: `files` relative to `root` (a worktree, or "" for the fleet root)."""
    files = params.get("files")
    if files is not None and not isinstance(files, list):
        raise Refuse("quarantine_file: params.files must be a list of paths")
    base = params.get("root") or ""
    raw = [str(Path(base) / f) if base else str(f) for f in files] if files else [subject]
    try:
        paths = [confine(ctx.root, r, link_anywhere=True) for r in raw]  # moved as links, never followed
    except UnsafePath as e:
        raise Refuse(str(e)) from e
    for pth in paths:
        if not _managed(ctx, pth):
            raise Refuse(f"{relative(ctx.root, pth)}: not in a managed area ({WORKTREES_DIR}/ or a registered worktree); "
                         "healer quarantines only files in the fleet's own areas")
    t = Target("", subject, params, path=paths[0])
    t.paths = paths
    return t


def _q_why_not(ctx: Context, p: Path) -> str | None:
    """Why this file may not be quarantined now, or None."""
    rel = relative(ctx.root, p)
    if not (p.exists() or p.is_symlink()):
        return f"{rel} no longer exists"
    if p.is_dir() and not p.is_symlink():
        return f"{rel} is a folder; quarantine its files one by one"
    if not p.is_symlink() and ctx.repo().tracked(p):
        return f"{rel} is tracked by git; healer never moves tracked files"
    busy = ctx.busy_pids(p) if not p.is_symlink() else []
    if busy:
        return f"{rel} is open by pid {', '.join(map(str, busy))}"
    return None


def _q_check(ctx: Context, t: Target) -> None:
    for p in t.paths:
        confine(ctx.root, p, link_anywhere=True)  # again, on fresh state: a symlinked folder may have appeared since
    why = [_q_why_not(ctx, p) for p in t.paths]
    if all(why):
        raise Abort("; ".join(why))


def _q_apply(ctx: Context, t: Target, intent: int) -> dict:
    ok = [p for p in t.paths if _q_why_not(ctx, p) is None]
    skipped = [w for w in (_q_why_not(ctx, p) for p in t.paths) if w]
    ents = qmod.quarantine_many(ctx.root, ok, t.params.get("why", "unknown file"), ctx.clock, intent=intent) if ok else []
    _journal_quarantine(ctx, ents)
    return {"quarantined": [{"id": e.id, "sha256": e.sha256, "size": e.size} for e in ents], "skipped": skipped}


def _journal_quarantine(ctx: Context, ents) -> None:
    """One event per file moved aside, so a checker can prove from the log that nothing was deleted."""
    for e in ents:
        ctx.store.append("quarantine.added", e.path, {"id": e.id, "sha256": e.sha256, "size": e.size, "reason": e.reason,
                                                     "intent": e.intent, "actor": ctx.actor})


def _q_verify(ctx: Context, t: Target) -> bool:
    # done when no listed file is still an unknown file in place (gone into quarantine, or tracked meanwhile)
    return all(not (p.exists() or p.is_symlink()) or ctx.repo().tracked(p) for p in t.paths) \
        and any(qmod.find(ctx.root, p) is not None for p in t.paths)


# -- managed areas ------------------------------------------------------------------

def _inside(p: Path, base: Path) -> bool:
    try:
        p.relative_to(base)
        return p != base
    except ValueError:
        return False


def _managed(ctx: Context, p: Path) -> bool:
    """The fleet's own areas: the worktrees folder and every registered worktree (never the main checkout)."""
    if _inside(p, ctx.root / WORKTREES_DIR):
        return True
    for wt in ctx.store.worktrees(states=None):
        base = Path(os.path.abspath(wt.path))
        if _inside(p, base) or (base.exists() and _inside(p, base.resolve())):
            return True
    return False


# -- remove_worktree ----------------------------------------------------------------

def _wt_record(ctx: Context, p: Path):
    real, want = Resolver(), str(p)
    for wt in ctx.store.worktrees(states=None):
        try:
            if real.text(wt.path) == want:
                return wt
        except OSError:
            continue
    return None


def _wt_resolve(ctx: Context, subject: str, params: dict) -> Target:
    t = _path_target(ctx, subject, params)
    if t.path.is_symlink():
        raise Refuse(f"{subject}: a symlink, not a worktree folder")
    wt = _wt_record(ctx, t.path)
    if wt is None and not _inside(t.path, ctx.root / WORKTREES_DIR):
        raise Refuse(f"{subject}: not a registered worktree nor a folder in {WORKTREES_DIR}/; healer removes only its own worktrees")
    t.ticket = wt.ticket_id if wt else None
    return t


def _wt_check(ctx: Context, t: Target) -> None:
    p = t.path
    wt = _wt_record(ctx, p)
    if not p.exists():
        if wt is None or wt.state == "removed":
            raise Abort(f"{t.subject} is already gone")
        return  # only the store still lists it: apply records the removal
    if not p.is_dir():
        raise Abort(f"{t.subject} is not a folder")
    real = Resolver()
    for a in ctx.store.agents(states=("running",)):
        if a.worktree and real(a.worktree) == p:
            alive, _ = liveness(a, ctx.runtime, ctx.host)
            if alive is not False:
                raise Abort(f"agent {a.id} works in {t.subject}")
    busy = ctx.busy_pids(p)
    if busy:
        raise Abort(f"{t.subject} is in use by pid {', '.join(map(str, busy))} (cwd or open file)")


def _wt_apply(ctx: Context, t: Target, intent: int) -> dict:
    p = t.path
    detail: dict[str, Any] = {}
    if p.exists():
        repo = ctx.repo()
        is_git = repo.is_toplevel(p)
        if is_git:
            files = repo.dirty(p)
        else:
            under = _files_under(p)
            tracked = [f for f in under if not f.is_symlink() and repo.tracked(f)]
            if tracked:
                raise Abort(f"{t.subject} holds files tracked by git ({relative(ctx.root, tracked[0])}…); not a removable worktree")
            files = [relative(p, f) for f in under]
        if files:
            ents = qmod.quarantine_many(ctx.root, [p / f for f in files], f"unknown file in worktree {relative(ctx.root, p)}",
                                        ctx.clock, intent=intent)
            _journal_quarantine(ctx, ents)
            detail["quarantined"] = [e.id for e in ents]
        busy = ctx.busy_pids(p)  # once more, right before the point of no return
        if busy:
            raise Abort(f"{t.subject} became busy (pid {', '.join(map(str, busy))}); quarantined files stay restorable")
        if is_git:
            repo.remove_worktree(p)
        else:
            left = [f for f in _files_under(p)]
            if left:
                raise HealerError(f"{t.subject}: files appeared during removal: {left[:3]}")
            for d in sorted((d for d in p.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True):
                d.rmdir()
            p.rmdir()
    wt = _wt_record(ctx, p)
    if wt is not None and wt.state != "removed":
        ctx.store.update_worktree(wt.path, state="removed", removed_at=ctx.now())
    return detail


def _files_under(p: Path) -> list[Path]:
    return [f for f in p.rglob("*") if f.is_file() or f.is_symlink()]


def _wt_verify(ctx: Context, t: Target) -> bool:
    wt = _wt_record(ctx, t.path)
    return not t.path.exists() and (wt is None or wt.state == "removed")


# -- escalate -----------------------------------------------------------------------

def _esc_check(ctx: Context, t: Target) -> None:
    tk = _ticket(ctx, t.ticket)
    if tk.state == lifecycle.CLOSED:
        raise Abort(f"{t.ticket} is closed")


def _esc_apply(ctx: Context, t: Target, intent: int) -> dict:
    from healer.notify import notify

    tid = t.ticket
    text = t.params.get("text") or f"{tid} needs a human: {t.params.get('why', 'remediation exhausted')}"
    evidence = t.params.get("evidence") or {}
    ctx.store.label(tid, NEEDS_HUMAN_LABEL, actor=ctx.actor)
    marker = f"[healer intent #{intent}]"
    if not any(marker in c.body for c in ctx.store.comments(tid)):
        body = f"{text}\n\n{marker} evidence:\n```json\n{json.dumps(evidence, indent=2, sort_keys=True, default=str)}\n```"
        ctx.store.comment(tid, body, author=ctx.actor)
    moved = False
    tk = ctx.store.ticket(tid)
    if t.params.get("move", True) and tk.state != lifecycle.NEEDS_HUMAN \
            and (tk.state, lifecycle.NEEDS_HUMAN) in lifecycle.TRANSITIONS and not _live_agents(ctx, tid):
        ctx.store.move_ticket(tid, lifecycle.NEEDS_HUMAN, actor=ctx.actor, reason="escalated", expect=tk.state)
        moved = True
    sent = notify(ctx.store, ctx.policy, f"escalate:{tid}", text, severity="critical", evidence=evidence)
    return {"moved": moved, "notified": sent}


def _esc_verify(ctx: Context, t: Target) -> bool:
    return NEEDS_HUMAN_LABEL in ctx.store.ticket(t.ticket).labels


# -- pause_dispatch / resume_dispatch -------------------------------------------------

def _dispatch_target(ctx: Context, subject: str, params: dict) -> Target:
    return Target("", subject or "dispatch", params)


def _paused(ctx: Context) -> bool:
    return bool(ctx.store.get_setting(keys.DISPATCH_PAUSED, False))


def _pause_check(ctx: Context, t: Target) -> None:
    if _paused(ctx):
        raise Abort("dispatch is already paused")


def _pause_apply(ctx: Context, t: Target, intent: int) -> dict:
    # the dispatcher lifts only a pause whose reason is its own ("main_red"); ours waits for resume_dispatch
    ctx.store.set_setting(keys.DISPATCH_PAUSED_REASON, PAUSED_BY_HEALER)
    ctx.store.set_setting(keys.DISPATCH_PAUSED_BY, {"actor": ctx.actor, "why": t.params.get("why", ""), "at": ctx.now(), "intent": intent})
    ctx.store.set_setting(keys.DISPATCH_PAUSED, True, event="dispatch.paused")
    return {}


def _resume_d_check(ctx: Context, t: Target) -> None:
    from healer.core.fleet import why_not_resume

    why = why_not_resume(_paused(ctx), ctx.store.get_setting(keys.DISPATCH_PAUSED_REASON),
                         ctx.store.get_setting(keys.MAIN_STATUS, "green"), PAUSED_BY_HEALER, bool(t.params.get("force")))
    if why:
        raise Abort(why)


def _resume_d_apply(ctx: Context, t: Target, intent: int) -> dict:
    ctx.store.set_setting(keys.DISPATCH_PAUSED_REASON, None)
    ctx.store.set_setting(keys.DISPATCH_PAUSED_BY, None)
    ctx.store.set_setting(keys.DISPATCH_PAUSED, False, event="dispatch.unpaused")
    return {}


# -- notify -------------------------------------------------------------------------

def _notify_resolve(ctx: Context, subject: str, params: dict) -> Target:
    if not (params.get("text") or params.get("why")):
        raise Refuse("notify needs params.text")
    return Target("", subject, params)


def _notify_apply(ctx: Context, t: Target, intent: int) -> dict:
    from healer.notify import notify

    p = t.params
    sent = notify(ctx.store, ctx.policy, p.get("key", t.subject), p.get("text") or p.get("why"), severity=p.get("severity", "warning"),
                  evidence=p.get("evidence"), cooldown=p.get("cooldown"))
    return {"sent": sent}


def _nothing(ctx: Context, t: Target) -> None:
    return None


# each action's shell half, named by its spec (healer/actions/<name>.py: handler="healer.remedy.actions:NAME")
CLOSE_DEAD_TICKET = Handler(_ticket_target, _close_check, _close_apply, _close_verify)
DROP_LABEL = Handler(_label_resolve, _label_check, _label_apply, _label_verify)
REQUEUE_TICKET = Handler(_ticket_target, _requeue_check, _requeue_apply, _requeue_verify)
UNBLOCK_TICKET = Handler(_ticket_target, _unblock_check, _unblock_apply, _unblock_verify)
RESUME_AGENT = Handler(_agent_target, _resume_check, _resume_apply, _resume_verify)
STOP_AGENT = Handler(_agent_target, _stop_check, _stop_apply, _stop_verify)
QUARANTINE_FILE = Handler(_q_resolve, _q_check, _q_apply, _q_verify)
REMOVE_WORKTREE = Handler(_wt_resolve, _wt_check, _wt_apply, _wt_verify)
ESCALATE = Handler(_ticket_target, _esc_check, _esc_apply, _esc_verify)
PAUSE_DISPATCH = Handler(_dispatch_target, _pause_check, _pause_apply, lambda ctx, t: _paused(ctx))
RESUME_DISPATCH = Handler(_dispatch_target, _resume_d_check, _resume_d_apply, lambda ctx, t: not _paused(ctx))
NOTIFY = Handler(_notify_resolve, _nothing, _notify_apply, lambda ctx, t: True)


def _shell_half(spec) -> Handler:
    ref = spec.handler
    if isinstance(ref, str):  # "module:NAME": the registry names the shell without importing it
        module, _, attr = ref.partition(":")
        ref = getattr(importlib.import_module(module), attr)
    if not all(callable(getattr(ref, part, None)) for part in ("resolve", "check", "apply", "verify")):
        raise TypeError(f"action {spec.name}: its handler {spec.handler!r} is no Handler (resolve, check, apply, verify)")
    return ref


class _Handlers(MutableMapping):
    """action -> its Handler, read from its spec (healer/actions/) on every look-up, so an action registered
    later has one and nothing goes stale; a test may set one to wrap the real one."""

    def __init__(self) -> None:
        self._set: dict[str, Handler] = {}

    def __getitem__(self, name: str) -> Handler:
        if name in self._set:
            return self._set[name]
        if name not in registry.ACTIONS:
            raise KeyError(name)
        return _shell_half(registry.get(name))

    def __setitem__(self, name: str, h: Handler) -> None:
        self._set[name] = h

    def __delitem__(self, name: str) -> None:
        del self._set[name]

    def __iter__(self):
        return iter(registry.names())

    def __len__(self) -> int:
        return len(registry.names())


HANDLERS = _Handlers()


def handler(name: str) -> Handler:
    """The shell's half of a registered action (UnknownAction for any other name)."""
    try:
        return HANDLERS[name]
    except KeyError:
        raise registry.UnknownAction(name) from None


# -- the path -----------------------------------------------------------------------

def _record(ctx: Context, out: Outcome, action: str, subject: str, params: dict) -> Outcome:
    ctx.store.append(f"remedy.{out.status}", subject, {"action": action, "reason": out.reason, "intent": out.intent_id,
                                                      "actor": ctx.actor, "params": params, "detail": out.detail})
    return out


def _resolve(ctx: Context, action: str, subject: str, params: dict) -> Target:
    h = handler(action)
    t = h.resolve(ctx, subject, params)
    t.action = action
    return t


def _me() -> dict:
    pid = os.getpid()
    return {"pid": pid, "pid_start": procs.mark(pid) or ""}


def execute(ctx: Context, action: PlannedAction) -> Outcome:
    """Carry out one planned action on the whitelist; never raises for a refusal or a failed effect."""
    name, subject, params = action.action, action.subject, dict(action.params or {})
    if name not in registry.ACTIONS:
        return _record(ctx, Outcome(REFUSED, f"unknown action {name!r}; the whitelist is {', '.join(registry.names())}"), str(name), subject, params)
    if name not in ctx.policy.remediation.allowed:
        return _record(ctx, Outcome(REFUSED, f"{name} is not in policy remediation.allowed"), name, subject, params)
    halted = ctx.halted()
    if halted:
        return _record(ctx, Outcome(REFUSED, halted), name, subject, params)
    try:
        target = _resolve(ctx, name, subject, params)
    except Refuse as e:
        return _record(ctx, Outcome(REFUSED, str(e)), name, subject, params)
    now = ctx.now()
    why = limiter.rate_limited(ctx.store, ctx.policy, name, now)
    if why is None and target.ticket and name in limiter.ATTEMPT_ACTIONS:
        why = limiter.quiet_period(ctx.store, ctx.policy, target.ticket, now, batch=ctx.batch)
    if why:
        return _record(ctx, Outcome(REFUSED, why), name, subject, params)

    journal = {"subject": subject, "params": params, "ticket": target.ticket, "_batch": ctx.batch, "_host": ctx.host, **_me()}
    # a ticket's attempts are journaled under the ticket, so its lease is one indexed look-up
    on_ticket = target.ticket if (target.ticket and (name in limiter.ATTEMPT_ACTIONS or name == "escalate")) else None
    intent = ctx.store.plan_intent(name, on_ticket or subject, journal, actor=ctx.actor,
                                   reason=action.reason or (action.rule or ""))
    failpoints.hit(FP_AFTER_INTENT)
    return _run(ctx, target, intent.id, fresh=True)


def _run(ctx: Context, t: Target, intent_id: int, *, fresh: bool, recovered: bool = False) -> Outcome:
    """From a planned (fresh) or begun (recovery) intent to done or aborted."""
    h = handler(t.action)
    extra = {"recovered": True} if recovered else {}
    if fresh:
        try:
            halted = ctx.halted()
            if halted:
                raise Abort(halted)
            h.check(ctx, t)
        except (Abort, UnsafePath, NotFound, lifecycle.InvalidTransition) as e:
            return _finish(ctx, t, intent_id, Outcome(ABORTED, str(e), intent_id, extra))
        ctx.store.set_intent(intent_id, "begun")
        failpoints.hit(FP_AFTER_BEGUN)
    try:
        detail = h.apply(ctx, t, intent_id)
    except failpoints.FailpointError:
        raise
    except (Abort, UnsafePath, NotFound, lifecycle.InvalidTransition) as e:
        return _finish(ctx, t, intent_id, Outcome(ABORTED, str(e), intent_id, extra))
    except Exception as e:  # noqa: BLE001 - an effect that breaks is journaled, never crashes the caller
        return _finish(ctx, t, intent_id, Outcome(FAILED, f"{type(e).__name__}: {e}", intent_id, extra))
    failpoints.hit(FP_AFTER_EFFECT)
    try:
        ok = h.verify(ctx, t)
    except Exception as e:  # noqa: BLE001
        return _finish(ctx, t, intent_id, Outcome(FAILED, f"verification raised {type(e).__name__}: {e}", intent_id, {**detail, **extra}))
    if not ok:
        return _finish(ctx, t, intent_id, Outcome(FAILED, "verification failed: the effect is not in place", intent_id, {**detail, **extra}))
    return _finish(ctx, t, intent_id, Outcome(DONE, "ok", intent_id, {**detail, **extra}))


def _finish(ctx: Context, t: Target, intent_id: int, out: Outcome) -> Outcome:
    state = "done" if out.status == DONE else "aborted"
    ctx.store.set_intent(intent_id, state, {"status": out.status, "reason": out.reason, "detail": out.detail})
    failpoints.hit(FP_AFTER_DONE)
    return _record(ctx, out, t.action, t.subject, t.params)


# -- recovery -----------------------------------------------------------------------

def _owner_alive(it, host: str, now: float, stale_after: float) -> bool:
    """Is the process that journaled this intent still running (so it is not ours to recover)?

    On another host its pid means nothing here: it is presumed alive until the intent is older
    than `stale_after` (the supervisor lease ttl), then recovered like any orphan."""
    p = it.params
    pid = p.get("pid")
    if p.get("_host", host) != host:
        return now - it.updated_at < stale_after
    if not pid:
        return False
    if pid == os.getpid():
        return False  # our own leftover (an exception mid-action): ours to finish
    m = p.get("pid_start") or p.get("ctime")  # ctime: a wall-clock create time written by an older healer
    return bool(m) and procs.same(int(pid), m)  # no record of who owned it: nobody to wait for


def recover(ctx: Context) -> list[Outcome]:
    """Finish or roll back every half-done intent whose owner is gone. Safe to call every tick."""
    outs: list[Outcome] = []
    if not switches.enabled("intent_recovery"):  # a game day proving its crash scenarios can fail
        return outs
    for it in ctx.store.intents(states=("planned", "begun")):
        if _owner_alive(it, ctx.host, ctx.now(), ctx.policy.supervisor.lease_ttl):
            continue
        subject = it.params.get("subject", it.subject)
        params = it.params.get("params", {})
        if it.action not in registry.ACTIONS:
            ctx.store.set_intent(it.id, "aborted", {"status": ABORTED, "reason": f"unknown action {it.action!r}", "recovered": True})
            continue
        if it.state == "planned":
            out = Outcome(ABORTED, "rolled back: interrupted before it began", it.id, {"recovered": True})
            ctx.store.set_intent(it.id, "aborted", {"status": out.status, "reason": out.reason, "detail": out.detail})
            outs.append(_record(ctx, out, it.action, subject, params))
            continue
        try:
            t = _resolve(ctx, it.action, subject, params)
        except (Refuse, NotFound) as e:
            out = Outcome(ABORTED, f"recovery: {e}", it.id, {"recovered": True})
            ctx.store.set_intent(it.id, "aborted", {"status": out.status, "reason": out.reason, "detail": out.detail})
            outs.append(_record(ctx, out, it.action, subject, params))
            continue
        h = handler(it.action)
        try:
            already = h.verify(ctx, t)
        except Exception:  # noqa: BLE001
            already = False
        if already:
            out = Outcome(DONE, "recovered: the effect was already in place", it.id, {"recovered": True})
            outs.append(_finish(ctx, t, it.id, out))
            continue
        try:
            h.check(ctx, t)
        except (Abort, UnsafePath, NotFound, lifecycle.InvalidTransition) as e:
            outs.append(_finish(ctx, t, it.id, Outcome(ABORTED, f"recovery: {e}", it.id, {"recovered": True})))
            continue
        outs.append(_run(ctx, t, it.id, fresh=False, recovered=True))
    return outs
