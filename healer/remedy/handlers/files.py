"""The actions on files: quarantine_file (moved aside, journaled, restorable) and remove_worktree (its unknown
files quarantined first). Both act only in the fleet's own areas: the worktrees folder and registered worktrees."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from healer import conventions as cv
from healer import quarantine as qmod
from healer.actions.spec import Abort, Handler, Refuse, Target
from healer.errors import HealerError
from healer.fleet.snapshot import liveness
from healer.paths import UnsafePath, confine, relative
from healer.realpath import Resolver
from healer.remedy.actions import Context
from healer.remedy.handlers.common import path_target

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
            raise Refuse(f"{relative(ctx.root, pth)}: not in a managed area ({cv.WORKTREES_DIR}/ or a registered worktree); "
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
        raise Abort("; ".join(w for w in why if w))


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
    if _inside(p, ctx.root / cv.WORKTREES_DIR):
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
    t = path_target(ctx, subject, params)
    if t.path.is_symlink():
        raise Refuse(f"{subject}: a symlink, not a worktree folder")
    wt = _wt_record(ctx, t.path)
    if wt is None and not _inside(t.path, ctx.root / cv.WORKTREES_DIR):
        raise Refuse(f"{subject}: not a registered worktree nor a folder in {cv.WORKTREES_DIR}/; healer removes only its own worktrees")
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


# each action's handler, named by its spec (healer/actions/<name>.py: handler="healer.remedy.handlers.files:NAME")
QUARANTINE_FILE = Handler(_q_resolve, _q_check, _q_apply, _q_verify)
REMOVE_WORKTREE = Handler(_wt_resolve, _wt_check, _wt_apply, _wt_verify)
