"""The actions on adopted loops (docs/adopt.md): snapshot_worktree, stop_adopted, restart_adopted.

A loop healer did not launch has no sandbox, no cgroup and no runner of healer's: what healer may do to it is
what the kernel lets it check. Its identity is (pid, start ticks): checked before every signal, and a process
that is no longer the adopted one is left alone (event adopt.identity_changed). Its uncommitted work is
committed to a recovery ref before any stop, through a temporary index: the worktree, its index and HEAD stay
exactly as they were.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from pathlib import Path

from healer import git
from healer.actions.spec import Abort, Handler, Refuse, Target
from healer.adopt import RealProcTable, worktree_state
from healer.conventions import RECOVERY_REFS
from healer.errors import NotFound
from healer.remedy.actions import Context

_IDENT = {"GIT_AUTHOR_NAME": "healer", "GIT_AUTHOR_EMAIL": "healer@localhost",
          "GIT_COMMITTER_NAME": "healer", "GIT_COMMITTER_EMAIL": "healer@localhost"}


def _table(ctx: Context):
    return ctx.proctable or RealProcTable()


def _adopted(ctx: Context, aid: str):
    try:
        return ctx.store.adopted_one(aid)
    except NotFound as e:
        raise Refuse(str(e)) from None


def _rule(ctx: Context, a):
    return next((r for r in ctx.policy.adopt.rules if r.name == a.rule), None)


def _target(ctx: Context, subject: str, params: dict) -> Target:
    a = _adopted(ctx, str(params.get("adopted") or subject))
    return Target("", a.id, params, agent=a.id, path=Path(a.worktree))


# -- snapshot_worktree --------------------------------------------------------------------------------

def recovery_refs(worktree: str | Path, aid: str) -> list[tuple[int, str, str]]:
    """(n, ref, commit) of the recovery refs of adopted loop `aid`, by n."""
    out = git.run(worktree, "for-each-ref", "--format=%(refname) %(objectname)", f"{RECOVERY_REFS}/{aid}/").stdout
    refs = []
    for line in out.splitlines():
        ref, _, sha = line.partition(" ")
        tail = ref.rsplit("/", 1)[-1]
        if tail.isdigit():
            refs.append((int(tail), ref, sha))
    return sorted(refs)


def snapshot(worktree: str | Path, aid: str, why: str = "") -> dict:
    """Commit the worktree's tracked changes and untracked (not ignored) files to refs/healer/recovery/<aid>/<n>,
    through a temporary index (GIT_INDEX_FILE): the worktree, its index and HEAD are not touched. The same tree as
    the newest recovery ref is that ref again (idempotent: a recovered intent makes no second one)."""
    wt = str(worktree)
    head = git.run(wt, "rev-parse", "--verify", "-q", "HEAD", check=False).stdout or None
    fd, index = tempfile.mkstemp(prefix="healer-snapshot-", suffix=".index")
    os.close(fd)
    try:
        os.unlink(index)  # our own empty temp file: git wants to create the index itself
        env = {"GIT_INDEX_FILE": index, **_IDENT}
        if head:
            git.run(wt, "read-tree", head, env=env)
        git.run(wt, "add", "-A", "--", ".", env=env)
        tree = git.run(wt, "write-tree", env=env).stdout
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(index)  # the temporary index we made (never a file of the worktree)
    refs = recovery_refs(wt, aid)
    if refs:
        n, ref, sha = refs[-1]
        if git.run(wt, "rev-parse", f"{sha}^{{tree}}").stdout == tree:
            return {"ref": ref, "commit": sha, "tree": tree, "n": n, "new": False}
    n = refs[-1][0] + 1 if refs else 1
    msg = f"healer: recovery snapshot of adopted loop {aid}" + (f" ({why})" if why else "")
    commit = git.run(wt, "commit-tree", tree, *(["-p", head] if head else []), "-m", msg, env=_IDENT).stdout
    ref = f"{RECOVERY_REFS}/{aid}/{n}"
    git.run(wt, "update-ref", ref, commit, "0" * 40)  # zeros: the ref must not exist yet (nothing overwritten)
    return {"ref": ref, "commit": commit, "tree": tree, "n": n, "new": True, "head": head}


def _snap_check(ctx: Context, t: Target) -> None:
    if not git.toplevel(t.path):
        raise Abort(f"{t.path} is no git worktree any more")


def _snapshot_recorded(ctx: Context, aid: str, worktree: str | Path, why: str) -> dict:
    """A snapshot, its event, and the worktree state it holds kept on the adopted loop (the planner skips the next
    one while that state stays: healer/actions/snapshot_worktree.py)."""
    state = worktree_state(str(worktree))
    out = snapshot(worktree, aid, why)
    if out["new"]:  # the same work again (two findings of one tick, a recovered intent) is the ref it already has
        ctx.store.append("adopt.snapshot", aid, {"worktree": str(worktree), **out})
    with contextlib.suppress(NotFound):
        a = ctx.store.adopted_one(aid)
        if state and (a.data or {}).get("snapshotted_state") != state:
            ctx.store.update_adopted(aid, data={**(a.data or {}), "snapshotted_state": state})
    return out


def _snap_apply(ctx: Context, t: Target, intent: int) -> dict:
    return _snapshot_recorded(ctx, t.agent or t.subject, t.path, str(t.params.get("why") or ""))


def _snap_verify(ctx: Context, t: Target) -> bool:
    return bool(recovery_refs(t.path, t.agent or t.subject))


# -- stop_adopted ---------------------------------------------------------------------------------------

def still_same(ctx: Context, a, table=None) -> bool:
    """Is pid still the adopted process (same start ticks)? If not, recorded once as adopt.identity_changed."""
    table = table or _table(ctx)
    now_ticks = table.start_ticks(a.pid)
    if now_ticks == a.start_ticks:
        return True
    ctx.store.append("adopt.identity_changed", a.id, {"pid": a.pid, "start_ticks": a.start_ticks,
                                                      "now_ticks": now_ticks, "actor": ctx.actor})
    return False


def _stop_check(ctx: Context, t: Target) -> None:
    a = ctx.store.adopted_one(t.agent)
    r = _rule(ctx, a)
    if r is None or not r.allow_stop:
        raise Abort(f"adopted loop {a.id}: its rule {a.rule!r} does not say allow_stop: true")
    if a.state != "adopted":
        raise Abort(f"adopted loop {a.id} is {a.state}")
    if a.pgid <= 1 or a.pgid == os.getpgrp():
        raise Abort(f"adopted loop {a.id}: process group {a.pgid} is not one healer signals")
    if not still_same(ctx, a):
        raise Abort(f"pid {a.pid} is no longer adopted loop {a.id} (another start time): nothing signalled")


def _signal(ctx: Context, a, sig: int, table) -> bool:
    if not still_same(ctx, a, table):
        return False
    if a.pgid == a.pid:
        table.kill_group(a.pgid, sig)  # its own group: the loop and every CLI it started
    else:
        # a group it shares with whoever started it (a shell without job control, a script's `&`): only the loop
        table.kill(a.pid, sig)
    return True


def _stop_apply(ctx: Context, t: Target, intent: int) -> dict:
    a = ctx.store.adopted_one(t.agent)
    r = _rule(ctx, a)
    table = _table(ctx)
    snap = _snapshot_recorded(ctx, a.id, a.worktree, "before stop")  # always before any signal
    detail: dict = {"snapshot": snap["ref"], "signals": []}
    if not _signal(ctx, a, signal.SIGTERM, table):
        raise Abort(f"pid {a.pid} is no longer adopted loop {a.id}: nothing signalled")
    detail["signals"].append("SIGTERM")
    grace = r.kill_grace if r is not None else ctx.policy.loop.kill_grace
    deadline = ctx.clock.monotonic() + grace
    while ctx.clock.monotonic() < deadline and table.start_ticks(a.pid) == a.start_ticks:
        ctx.clock.sleep(0.05)
    if table.start_ticks(a.pid) == a.start_ticks:
        if _signal(ctx, a, signal.SIGKILL, table):
            detail["signals"].append("SIGKILL")
    ctx.store.update_adopted(a.id, state="stopped", ended_at=ctx.now(), event="adopt.stopped",
                             payload={"pid": a.pid, "pgid": a.pgid, **detail})
    return detail


def _stop_verify(ctx: Context, t: Target) -> bool:
    a = ctx.store.adopted_one(t.agent)
    return _table(ctx).start_ticks(a.pid) != a.start_ticks


# -- restart_adopted --------------------------------------------------------------------------------------

def _restart_check(ctx: Context, t: Target) -> None:
    a = ctx.store.adopted_one(t.agent)
    r = _rule(ctx, a)
    if r is None or not r.restart_command:
        raise Abort(f"adopted loop {a.id}: its rule {a.rule!r} declares no restart_command")
    if _table(ctx).start_ticks(a.pid) == a.start_ticks:
        raise Abort(f"adopted loop {a.id} is still running: never restarted over a live loop")
    if (a.data or {}).get("restarted_pid"):
        raise Abort(f"adopted loop {a.id} was restarted already (pid {a.data['restarted_pid']})")


def _restart_apply(ctx: Context, t: Target, intent: int) -> dict:
    a = ctx.store.adopted_one(t.agent)
    r = _rule(ctx, a)
    assert r is not None and r.restart_command  # _restart_check
    log_dir = Path(ctx.root) / ".healer" / "adopt"
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"{a.id}.restart.log", "ab") as log:
        p = subprocess.Popen(list(r.restart_command), cwd=a.worktree, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)  # its own group: adopted anew, not ours
    ctx.store.update_adopted(a.id, data={**(a.data or {}), "restarted_pid": p.pid}, event="adopt.restarted",
                             payload={"argv": list(r.restart_command), "pid": p.pid, "worktree": a.worktree})
    return {"pid": p.pid}


def _restart_verify(ctx: Context, t: Target) -> bool:
    return bool((ctx.store.adopted_one(t.agent).data or {}).get("restarted_pid"))


SNAPSHOT_WORKTREE = Handler(_target, _snap_check, _snap_apply, _snap_verify)
STOP_ADOPTED = Handler(_target, _stop_check, _stop_apply, _stop_verify)
RESTART_ADOPTED = Handler(_target, _restart_check, _restart_apply, _restart_verify)
