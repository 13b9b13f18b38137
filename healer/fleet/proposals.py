"""Proposals: a ticket's branch is merged onto main only if the merge gates pass on the merge result.

The merge is built in a scratch worktree (`.healer/scratch/`), never in the user's
checkout; main then advances to that exact commit by fast-forward (or a
compare-and-swap ref update), never by force. A crash at any point is harmless:
the proposal stays open and is gated again, and a branch already on main is
recognised as merged.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

from healer import conventions as cv
from healer import failpoints, git, guarded
from healer.clock import Clock
from healer.errors import host_trouble
from healer.fleet.gates import PASS, gate_checkout
from healer.records import Proposal

FP_BEFORE_MERGE = failpoints.declare("dispatch.before_merge", "healer/fleet/proposals.py: merge gates passed, main not yet advanced")
FP_AFTER_MERGE = failpoints.declare("dispatch.after_merge", "healer/fleet/proposals.py: main advanced, proposal not yet marked merged")

MERGED = "merged"
REJECTED = "rejected"
DEFERRED = "deferred"  # could not decide now (main moved, checkout busy); gated again next tick
WITHHELD = "withheld"  # gates passed, but the ticket left review meanwhile: never merged behind the board's back

LOG_LINES = 200


@dataclass(frozen=True)
class Verdict:
    outcome: str  # merged | rejected | deferred
    log: str
    main_before: str | None = None
    main_after: str | None = None
    conflict: dict | None = None  # rejected for a merge conflict: {"files": [...], "with": ["<sha> <subject>", ...], "main": name}
    guarded: str | None = None  # rejected for what its commits change (a protected path, the fleet's configuration)


CONFLICT = "merge: conflict with "  # the gate log's last line of a conflict: the reason an escalation quotes


def conflict_of(scratch: Path, main: str, main_rev: str, commit: str) -> dict:
    """What a failed `git merge` in `scratch` conflicted on, read before `merge --abort`: the unmerged files and
    main's commits since the fork point that changed them (what the proposal collided with)."""
    files = [f for f in git.run(scratch, "diff", "--name-only", "-z", "--diff-filter=U", check=False).stdout.split("\0") if f]
    base = git.run(scratch, "merge-base", main_rev, commit, check=False).stdout
    hits: list[str] = []
    if base and files:
        hits = git.run(scratch, "log", "--format=%h %s", "--max-count=5", main_rev, f"^{base}", "--", *files[:50],
                       check=False).stdout.splitlines()
    return {"main": main, "files": files[:50], "with": hits}


def conflict_text(c: dict) -> str:
    """One line: `merge: conflict with main in a.py, b.py (main's 1a2b3c fix a; ...)`."""
    files = ", ".join(c.get("files") or []) or "files git did not name"
    by = "; ".join(c.get("with") or [])
    return f"{CONFLICT}{c.get('main')} in {files}" + (f" (changed on {c.get('main')} by {by})" if by else "")


def rejection_reason(gate_log: str) -> str | None:
    """The conflict line of a rejected proposal's gate log, or None (a failing gate's log speaks for itself)."""
    return next((ln for ln in reversed(gate_log.splitlines()) if ln.startswith(CONFLICT)), None)


def scratch_dir(root: Path, name: str) -> Path:
    return root / ".healer" / "scratch" / name


def sweep_scratch(root: Path) -> list[str]:
    """Remove scratch worktrees left by a dispatcher that died mid-proposal (only healer's own folder)."""
    base = root / ".healer" / "scratch"
    left = sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    for p in left:
        clear_scratch(p, root)
    return [str(p) for p in left]


def clear_scratch(p: Path, root: Path) -> None:
    """Remove a scratch worktree (healer's own throwaway checkout). What a `worktree add` killed halfway
    left there (a folder git does not know, an entry locked "initializing") is set aside to
    .healer/scratch-stale/ (kept) by the same repair as a ticket's worktree, or every later merge of that
    proposal would fail on it."""
    git.run(root, "worktree", "unlock", str(p), check=False)
    git.remove_worktree(p, root, check=False)
    if p.exists():
        git.set_aside(root, p, cv.set_aside_dir(root, "scratch") / f"{p.name}.{uuid.uuid4().hex[:8]}")


def merge_message(p: Proposal) -> str:
    """The merge commit names its ticket in the subject and as a trailer (`git log --grep 'Healer-Ticket: T-1'`)."""
    return f"healer: merge {p.branch} ({p.ticket_id})\n\nHealer-Ticket: {p.ticket_id}"


VET_MAX = 500  # commits of a proposal vetted one by one; more is no proposal a loop makes


def guard_of(policy, root: Path):
    """What no proposal may change (path -> its class, or None): the fleet's configuration (healer/guarded.py,
    derived from the dispatcher's own policy, never from the tree), the instruction files the policy does not allow,
    and `loop.protected_paths`. The loop never commits any of them; a commit that does was not the loop's."""
    L = policy.loop
    config = guarded.config_paths(policy.model_dump(mode="json"), "", str(root))
    instr = guarded.instruction_patterns(list(getattr(L, "instruction_files", None) or []))
    allow = list(getattr(L, "instruction_files_allow", None) or [])
    prot = list(L.protected_paths)

    def guard(path: str) -> str | None:
        if guarded.protected(path, config):
            return "the fleet's configuration"
        if guarded.instruction_file(path, instr, allow):
            return "an agent-instruction or tool-config file"
        return "a protected path" if guarded.protected(path, prot) else None
    return guard


def foreign(root: Path, main: str, commit: str, patterns, guard=None) -> str | None:
    """Why the commits `commit` would bring onto main (`main..commit`) are not all the loop's own, or None.
    Every one must be a commit healer's loop made: one parent (the loop never merges), the `Healer-Run:` trailer,
    and no protected path changed from its parent, so a commit an agent made (a "Security Team, Reviewed-by"
    one gutting a test) never reaches main, whatever the tree at the tip holds (issue 31). The trailer can be
    forged by an unsandboxed agent; the protected paths cannot be."""
    if guard is None:
        guard = lambda p: "a protected path" if guarded.protected(p, patterns) else None  # noqa: E731
    r = git.run(root, "rev-list", "--parents", f"--max-count={VET_MAX + 1}", commit, f"^{main}", check=False)
    if r.code != 0:
        return f"cannot list the commits of {commit[:12]}: {r.text[-200:]}"
    rows = [ln.split() for ln in r.stdout.splitlines() if ln.strip()]
    if len(rows) > VET_MAX:
        return f"more than {VET_MAX} commits between {main} and {commit[:12]}"
    for row in rows:
        sha, parents = row[0], row[1:]
        if len(parents) != 1:
            return f"commit {sha[:12]} has {len(parents)} parents: the loop never makes such a commit"
        body = git.run(root, "log", "-1", "--format=%an <%ae>%x00%(trailers:key=Healer-Run,valueonly)", sha).stdout
        who, _, run = body.partition("\0")
        if not run.strip():
            return f"commit {sha[:12]} by {who} was not made by healer's loop (no Healer-Run trailer)"
        d = git.raw(root, "diff-tree", "-r", "-z", "--name-only", "--no-renames", "--no-commit-id", parents[0], sha)
        bad = [(x, why) for x in d.decode("utf-8", "surrogateescape").split("\0") if x and (why := guard(x))]
        if bad:
            kinds = "; ".join(f"{p} ({why})" for p, why in bad[:10])
            return f"commit {sha[:12]} ({who}) changes protected paths: {kinds}"
    return None


def gate_proposal(root: Path, policy, p: Proposal, clock: Clock, still_wanted=None) -> Verdict:
    """Merge `p` onto main in a scratch worktree, run the merge gates, advance main on a pass.

    `still_wanted()` is asked right before main advances (compare-and-set on the board): a reason
    it returns (the ticket was escalated or moved while the gates ran) withholds the merge."""
    main = policy.fleet.main_branch
    old = git.rev(root, f"refs/heads/{main}")
    if old is None:
        return Verdict(DEFERRED, f"branch {main} does not exist in {root}")
    if git.rev(root, p.commit) is None:
        return Verdict(REJECTED, f"commit {p.commit} is not in the repository", old)
    if git.is_ancestor(root, p.commit, old):
        return Verdict(MERGED, f"{p.commit[:12]} is already on {main}", old, old)
    why = foreign(root, old, p.commit, policy.loop.protected_paths, guard_of(policy, root))
    if why:
        return Verdict(REJECTED, f"not merged: {why}", old, guarded=why)

    scratch = scratch_dir(root, f"{p.ticket_id}-p{p.id}")
    clear_scratch(scratch, root)
    scratch.parent.mkdir(parents=True, exist_ok=True)
    git.run(root, "worktree", "add", "--detach", str(scratch), old)
    try:
        # --no-ff: always a merge commit, so `git log main` names the ticket even when main could fast-forward
        m = git.run(scratch, *git.IDENTITY, "merge", "--no-ff", "--no-edit", "-m", merge_message(p), p.commit,
                    check=False)
        if m.code != 0:
            c = conflict_of(scratch, main, old, p.commit)
            git.run(scratch, "merge", "--abort", check=False)
            if host_trouble(RuntimeError(m.text)):  # a full disk is no conflict: decided again once there is room
                return Verdict(DEFERRED, f"$ git merge {p.branch}\n{m.text}\nmerge: the host took no more writes", old)
            return Verdict(REJECTED, f"$ git merge {p.branch}\n{m.text}\n{conflict_text(c)}", old, conflict=c)
        new = git.rev(scratch)
        if new is None:  # a merge that succeeded has a HEAD: never advance main to an empty name
            raise git.GitError(f"{scratch}: no HEAD after the merge of {p.commit}")
        res = gate_checkout(root, scratch, policy.fleet.merge_gates, policy.loop, clock, base=old)
        log = "\n".join(res.log.splitlines()[-LOG_LINES:])
        if res.outcome != PASS:
            return Verdict(REJECTED, log or f"merge gate {res.failed}: {res.outcome}", old)
        failpoints.hit(FP_BEFORE_MERGE)
        why = still_wanted() if still_wanted is not None else None
        if why:
            return Verdict(WITHHELD, f"{log}\nnot merged: {why}".strip(), old)
        try:
            git.advance(root, main, old, new)
        except git.GitError as e:
            try:
                finished = finish_cut_short(Path(root), main, old, new)
            except git.GitError:
                finished = False  # still no room: decided again next pass
            if not finished:
                return Verdict(DEFERRED, f"{log}\n{e}".strip(), old)
        failpoints.hit(FP_AFTER_MERGE)
        return Verdict(MERGED, log, old, new)
    finally:
        git.remove_worktree(scratch, root, check=False)


def finish_cut_short(root: Path, branch: str, old: str, new: str) -> bool:
    """Finish a fast-forward of the checked-out `branch` that a full disk cut short, or touch nothing (False).

    `git merge --ff-only` writes the work tree first, then the index, then the ref: cut short after the
    files, it leaves the proposal's files in main's checkout while main (and the ticket: still review) are
    at `old`, and every later fast-forward refuses to overwrite them. When every path `old..new` changes is,
    on disk, exactly as `old` or as `new` has it (so nobody else's change is among them) and at least one is
    as `new` has it, healer's own merge is finished: the ref by compare-and-swap, those paths' index entries,
    and the files still at `old` written as `new` has them. Anything else (a user's edit, a symbolic link,
    a submodule) is left alone and the proposal stays deferred."""
    if git.current_branch(root) != branch or git.rev(root) != old:
        return False
    paths = [p for p in git.raw(root, "diff", "--name-only", "-z", "--no-renames", old, new).decode().split("\0") if p]
    if not paths or any("\n" in p for p in paths):
        return False

    def tree(rev: str) -> dict[str, tuple[str, str]]:
        out = {}
        for rec in git.raw(root, "ls-tree", "-r", "-z", rev, "--", *paths).decode().split("\0"):
            if rec:
                meta, path = rec.split("\t", 1)
                mode, _, oid = meta.split()
                out[path] = (mode, oid)
        return out

    was, will = tree(old), tree(new)
    if any(m not in ("100644", "100755") for m, _ in [*was.values(), *will.values()]):
        return False
    present = []
    for p in paths:
        f = root / p
        if f.is_symlink() or (f.exists() and not f.is_file()):
            return False
        if f.exists():
            present.append(p)
    hashes = git.raw(root, "hash-object", "--stdin-paths", input="\n".join(present).encode()).decode().split() if present else []
    disk = dict(zip(present, hashes, strict=True))
    written = False
    for p in paths:
        at_old = disk.get(p) == (was[p][1] if p in was else None)
        at_new = disk.get(p) == (will[p][1] if p in will else None)
        if not (at_old or at_new):
            return False  # somebody else's change: never touched
        written = written or (at_new and not at_old)
    if not written:
        return False  # the merge wrote nothing: its failure was another one
    git.run(root, "update-ref", "-m", "healer: finish a fast-forward the disk cut short", f"refs/heads/{branch}", new, old)
    git.run(root, "reset", "-q", new, "--", *paths)  # those paths' index entries as `new` has them
    stale = [p for p in paths if p in will and disk.get(p) != will[p][1]]
    if stale:
        git.run(root, "checkout", "-q", new, "--", *stale)
    for p in paths:
        if p not in will and p in disk:
            (root / p).unlink()  # at `old`'s content (checked above), which the merge deletes: kept in `old`
    return True
