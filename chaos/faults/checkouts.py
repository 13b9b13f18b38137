"""The git and worktree faults, one implementation for both worlds: each acts on the fleet's repository through
the world's Git port (the product's own protocol, healer/fleet/ports.py: `RealGit` over a real repository in real
mode, `SimGit` over the simulated world's repository model, chaos/engine/simgit.py) and on the files of its
checkouts, so that a stale index.lock, an unknown file, an orphan or a vanished worktree is the same real effect
in both worlds, found by the product as it finds it on a machine.
"""

from __future__ import annotations

from pathlib import Path

from chaos.faults import repo
from chaos.faults.board import tickets
from chaos.faults.world import World
from chaos.scenario import match
from chaos.scenario_parts import Fault
from healer import conventions as cv
from healer.records import Worktree


def _worktrees(e: World, f: Fault) -> list[Worktree]:
    return [w for w in e.store.worktrees() if match(f.target or "*", w.ticket_id or "") and Path(w.path).exists()]


def index_lock(e: World, f: Fault) -> str:
    """A stale index.lock in the fleet's main checkout (`target: main`, or none) or in the target's worktree."""
    where = e.root
    if f.target and f.target != "main":
        wts = _worktrees(e, f)
        if not wts:
            return f"no worktree for {f.target}"
        where = Path(wts[0].path)
    lock = repo.index_lock(e.undo, where, e.run_id, e.git)
    return f"stale {lock}" if lock else "an index.lock was already there; left alone"


def unknown_files(e: World, f: Fault) -> str:
    n = 0
    for w in _worktrees(e, f):
        for p, digest in repo.unknown_files(Path(w.path), f.count, f"{w.ticket_id}-{e.run_id}").items():
            e.injected[str(p.relative_to(e.root))] = digest
            n += 1
    return f"{n} unknown file(s)"


def orphan_worktree(e: World, f: Fault) -> str:
    """A worktree (a checkout of the ticket's branch, made as the dispatcher makes one) for each target ticket,
    recorded `seconds` ago."""
    ids = tickets(e, f)
    for tid in ids:
        wt = cv.worktree_for(e.root, tid)
        e.git.add_worktree(e.root, wt, cv.branch_for(tid), e.policy.fleet.main_branch)
        if not any(w.path == str(wt) for w in e.store.worktrees()):
            e.store.add_worktree(Worktree(str(wt), tid, cv.branch_for(tid), e.now - float(f.seconds or 3600)))
    return f"{len(ids)} orphan worktree(s)"


def delete_worktree(e: World, f: Fault) -> str:
    """The target's worktree folder vanishes (moved to the game day's trash, never deleted: git's entry for it
    stays, as when a human `rm -rf`s it)."""
    moved = [str(repo.delete_worktree(Path(w.path), e.trash)) for w in _worktrees(e, f)]
    return f"{len(moved)} worktree(s) vanished (kept in {e.trash})"


def zombie_ticket(e: World, f: Fault) -> str:
    ids = tickets(e, f)
    head = e.git.rev(e.root, f"refs/heads/{e.policy.fleet.main_branch}")
    for tid in ids:
        e.store.set_ticket_data(tid, merged_commit=head)
    return f"{len(ids)} ticket(s) whose work is already on main"


INJECT = {fn.__name__: fn for fn in (index_lock, unknown_files, orphan_worktree, delete_worktree, zombie_ticket)}
