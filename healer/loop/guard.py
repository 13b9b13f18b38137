"""What an agent may not change outside its worktree, checked from outside after each iteration.

Two checks, both before/after comparisons made by the loop (never by the agent):

- **The git common directory** (hooks, config, info/, alternates, HEAD files, refs other than
  the worktree's own branch): every change is reported (`loop.git_tampered`, with the paths)
  and undone: files come back byte for byte from the copy taken before the agent ran, the
  agent's versions go to the iteration's quarantine folder; refs are moved back by
  compare-and-swap and new refs are kept under `refs/healer/quarantine/`. In a fleet, what healer's
  own parts move is left out first (`fleet_moves_dropped`: merges, other tickets' branches, fetches,
  other worktrees' admin folders); the rest is undone there too.
- **The run's own branch** stays at the run's base: an agent's commits are set aside
  (`set_commits_aside`, `loop.agent_commits`), the loop alone commits.
- **Writes outside the worktree** that healer can see (the fleet root or the project beside
  the worktree, the folder that holds it, $HOME's top level): reported as `loop.outside_write`
  when the agent runs unsandboxed. Inside bubblewrap they cannot happen.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from healer import git, walk

Entry = tuple  # ("d",) | ("l", target) | ("f", mode, bytes)
CAP = 50_000  # entries per scan: a huge folder is scanned in part, never for ever


def _entry(p: Path | str) -> Entry | None:
    try:
        st = os.lstat(p)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return ("l", os.readlink(p))
    if stat.S_ISDIR(st.st_mode):
        return ("d",)
    if stat.S_ISREG(st.st_mode) and st.st_size <= 1 << 20:
        try:
            with open(p, "rb") as f:
                return ("f", stat.S_IMODE(st.st_mode), f.read())
        except OSError:
            return ("f", stat.S_IMODE(st.st_mode), b"")
    return ("f", stat.S_IMODE(st.st_mode), f"<{st.st_size} bytes, mtime {st.st_mtime_ns}>".encode())


DEEP: Entry = ("deep",)  # a folder past walk.DEPTH: never read, never restored; new, it is set aside whole


def _walk(base: Path, rel: str, out: dict[str, Entry]) -> None:
    top = os.path.join(base, rel)
    e = _entry(top)
    if e is None:
        return
    out[rel] = e
    if e[0] != "d":
        return
    got = walk.walk(top, entries=max(0, CAP - len(out)))  # iterative and bounded: no RecursionError however deep
    for r, _st in got.entries:
        sub = _entry(os.path.join(top, r))
        if sub is not None:
            out[f"{rel}/{r}"] = sub
    for r in got.over:
        if r:
            out[f"{rel}/{r}"] = DEEP


@dataclass
class GitSnap:
    common: Path
    git_dir: Path
    own_ref: str | None
    top: Path = Path(".")
    files: dict[str, Entry] = field(default_factory=dict)  # relative to common ("@wt/..." for the worktree's own admin dir)
    refs: dict[str, str] = field(default_factory=dict)
    own_value: str | None = None  # what the branch's ref holds: an id (it may move), never `ref: ...`


def _abs(s: GitSnap, rel: str) -> Path:
    if rel == "@top/.git":
        return s.top / ".git"
    return s.git_dir / rel[4:] if rel.startswith("@wt/") else s.common / rel


_dirs: dict[Path, tuple[Path, Path, Path]] = {}


def _git_dirs(workdir: Path) -> tuple[Path, Path, Path] | None:
    """(git dir, common dir, the resolved work tree), pinned once found: an agent that removes or replaces
    .git, or links the work tree elsewhere, must not move what is compared."""
    if workdir not in _dirs:
        lay = git.layout(workdir)
        if lay is None:
            return None
        _dirs[workdir] = (lay.git_dir, lay.common, workdir.resolve())
    return _dirs[workdir]


def _refs(common: Path, deep: list[str] | None = None) -> dict[str, str]:
    """Every ref, read from the files (loose refs win over packed ones): no git process, so the
    check costs microseconds per iteration, and a ref git would refuse to read is still seen. `deep` gets the
    folders too deep to read (walk.DEPTH)."""
    out: dict[str, str] = {}
    try:
        for line in (common / "packed-refs").read_text(errors="replace").splitlines():
            if line and line[0] not in "#^" and " " in line:
                sha, name = line.split(" ", 1)
                out[name] = sha
    except OSError:
        pass
    got = walk.walk(os.path.join(common, "refs"))  # iterative and bounded (1,200 nested folders an agent made)
    for r, st in got.entries:
        if stat.S_ISDIR(st.st_mode) or r.endswith(".lock"):
            continue
        try:
            with open(os.path.join(common, "refs", r), errors="replace") as f:
                out[f"refs/{r}"] = f.read(4096).strip()
        except OSError:
            continue
    if deep is not None:
        deep.extend(f"refs/{r}" for r in got.over if r)
    return out


def git_capture(workdir: Path, fleet: bool = False) -> GitSnap | None:
    """The git common directory as the guard compares it. In a fleet (`fleet`), only this worktree's own admin
    folder of `worktrees/`: the others are other tickets' and the dispatcher's scratch checkouts, made, moved and
    removed while this loop runs (their own loops watch theirs; the dispatcher owns its scratch ones)."""
    d = _git_dirs(Path(workdir))
    if d is None:
        return None
    gd, cd, top = d
    try:
        head = (gd / "HEAD").read_text(errors="replace").strip()
    except OSError:
        head = ""
    own = head[5:].strip() if head.startswith("ref: ") else None
    s = GitSnap(cd, gd, own, top)
    if (s.top / ".git").is_file() or (s.top / ".git").is_symlink():  # the worktree's pointer to its git dir
        e = _entry(s.top / ".git")
        if e is not None:
            s.files["@top/.git"] = e
    for rel in ("hooks", "info", "config", "config.worktree", "objects/info/alternates", "HEAD", "commondir", "shallow"):
        _walk(cd, rel, s.files)
    wts = cd / "worktrees"
    if wts.is_dir() and not wts.is_symlink():
        mine = [wts / gd.name] if fleet and gd.parent == wts else [] if fleet else sorted(wts.iterdir())
        for d2 in mine:
            for n in ("HEAD", "config.worktree", "commondir", "gitdir"):
                _walk(cd, f"worktrees/{d2.name}/{n}", s.files)
    if gd != cd and not str(gd).startswith(str(wts) + os.sep):
        for n in ("HEAD", "config.worktree", "commondir", "gitdir"):
            e = _entry(gd / n)
            if e is not None:
                s.files[f"@wt/{n}"] = e
    deep: list[str] = []
    for name, sha in _refs(cd, deep).items():
        if name == own:
            s.own_value = sha
        elif not name.startswith("refs/healer/"):
            s.refs[name] = sha
    for rel in deep:  # compared like a file: one an agent made is set aside whole (git_revert)
        s.files[rel] = DEEP
    return s


def _symbolic(v: str | None) -> bool:
    return v is not None and v.startswith("ref:")


@dataclass
class GitChanges:
    files: list[str]
    refs: dict[str, tuple[str | None, str | None]]  # ref -> (before, after)

    def __bool__(self) -> bool:
        return bool(self.files or self.refs)

    def paths(self, s: GitSnap) -> list[str]:
        return [str(_abs(s, r)) for r in self.files] + sorted(self.refs)


def _deep_top(before: GitSnap, rel: str) -> str:
    """The shallowest folder above a too-deep one under refs/ that held no ref before: set aside whole, so no
    chain of empty folders is left behind."""
    if not rel.startswith("refs/"):
        return rel
    used = {*before.refs, *([before.own_ref] if before.own_ref else [])}
    parts = rel.split("/")
    for i in range(3, len(parts) + 1):
        top = "/".join(parts[:i])
        if not any(r == top or r.startswith(top + "/") for r in used):
            return top
    return rel


def git_changes(before: GitSnap, after: GitSnap) -> GitChanges:
    files = sorted(k for k in set(before.files) | set(after.files) if before.files.get(k) != after.files.get(k))
    files = sorted({_deep_top(before, k) if after.files.get(k) == DEEP and k not in before.files else k for k in files})
    refs = {k: (before.refs.get(k), after.refs.get(k)) for k in set(before.refs) | set(after.refs)
            if before.refs.get(k) != after.refs.get(k)}
    if after.own_ref and after.own_ref == before.own_ref and _symbolic(after.own_value):
        # the branch may move (the agent commits), but made a link to another ref every commit through
        # HEAD would land on that one (main, another ticket's branch)
        refs[after.own_ref] = (before.own_value, after.own_value)
    return GitChanges(files, dict(sorted(refs.items())))


MERGES_SEEN = 50  # the dispatcher's merges one agent step may span


def _healers_merge(workdir: Path, old: str | None, new: str | None) -> bool:
    """`new` is `old` advanced by merges the fleet's dispatcher made: following first parents from `new` reaches
    `old` through commits that each name their ticket (`Healer-Ticket:`, proposals.merge_message)."""
    if not old or not new or _symbolic(old) or _symbolic(new):
        return False
    c = new
    for _ in range(MERGES_SEEN):
        r = git.run(workdir, "cat-file", "commit", c, check=False)
        head, _, body = r.stdout.partition("\n\n")
        parents = [ln[7:] for ln in head.splitlines() if ln.startswith("parent ")]
        if r.code != 0 or len(parents) != 2 or not any(ln.startswith("Healer-Ticket: ") for ln in body.splitlines()):
            return False
        if parents[0] == old:
            return True
        c = parents[0]
    return False


def _undoes_foreign(workdir: Path, old: str | None, new: str | None) -> bool:
    """`new` is where the ref stood before `old` was set by something that is not healer's: an ancestor of `old`
    from which `old` is not reached by the dispatcher's merges (a neighbour's guard undoing its agent's move)."""
    if not old or not new or _symbolic(old) or _symbolic(new):
        return False
    r = git.run(workdir, "merge-base", "--is-ancestor", new, old, check=False)
    return r.code == 0 and not _healers_merge(workdir, new, old)


def fleet_moves_dropped(workdir: Path, before: GitSnap, ch: GitChanges) -> GitChanges:
    """The ref moves of a fleet that are healer's own, left out of what this loop reports: other tickets'
    branches (their loops commit; the agent's own branch is checked by the runner), remote-tracking refs (the
    dispatcher fetches), and main advanced by a merge the dispatcher made. What stays is reported."""
    keep = {}
    for ref, (old, new) in ch.refs.items():
        if ref != before.own_ref and not _symbolic(new):
            if ref.startswith("refs/heads/healer/") or ref.startswith("refs/remotes/"):
                continue
            if _healers_merge(workdir, old, new):
                continue
            if _undoes_foreign(workdir, old, new):
                continue  # another loop's guard put back a move its own agent made: never "restored" to the attack
        keep[ref] = (old, new)
    return GitChanges(ch.files, keep)


def _blocked(base: Path, rel: str) -> bool:
    parts = rel.split("/")
    for i in range(1, len(parts)):
        p = base / "/".join(parts[:i])
        if p.is_symlink() or (os.path.lexists(p) and not p.is_dir()):
            return True
    return False


def git_revert(workdir: Path, before: GitSnap, ch: GitChanges, qdir: Path, run_id: str, n: int,
               move_refs: bool) -> list[dict]:
    """Undo `ch`: the agent's files to `qdir/git/`, the earlier bytes back; refs moved back by
    compare-and-swap (only when `move_refs`), new refs kept under refs/healer/quarantine/."""
    done: list[dict] = []
    for rel in sorted(ch.files, key=lambda r: (r.count("/"), r)):
        p = _abs(before, rel)
        base = before.git_dir if rel.startswith("@wt/") else before.top if rel.startswith("@top/") else before.common
        inner = rel[5:] if rel.startswith("@top/") else rel[4:] if rel.startswith("@wt/") else rel
        if _blocked(base, inner) or not os.path.lexists(p):
            continue
        was = before.files.get(rel)
        if was is not None and was[0] == "d" and p.is_dir() and not p.is_symlink():
            continue  # a folder that stayed a folder: its entries are handled one by one
        dst = qdir / "git" / rel.replace("@wt/", "worktree/").replace("@top/", "top/")
        dst.parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(dst):
            dst = dst.with_name(f"{dst.name}.{os.getpid()}.{len(done)}")
        try:  # a rename on the same file system, whatever the depth below it
            os.rename(p, dst)
        except OSError:
            try:
                shutil.move(str(p), str(dst))
            except (OSError, RecursionError) as e:  # too deep to copy across file systems: reported, left
                done.append({"path": str(p), "action": "left", "why": str(e)[:200]})
                continue
        done.append({"path": str(p), "action": "quarantined", "saved_as": str(dst)})
    for rel in sorted(ch.files, key=lambda inner: (inner.count("/"), inner)):
        was = before.files.get(rel)
        if was is None or was == DEEP:
            continue
        p = _abs(before, rel)
        if was[0] == "d":
            p.mkdir(parents=True, exist_ok=True)
            continue
        if os.path.lexists(p):
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        if was[0] == "l":
            os.symlink(was[1], p)
        else:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, was[1])
            with os.fdopen(fd, "wb") as f:
                f.write(was[2])
            os.chmod(p, was[1])
        done.append({"path": str(p), "action": "restored"})
    zero = "0" * 40
    for ref, (old, new) in ch.refs.items():
        mine = ref == before.own_ref  # in a fleet the only ref a run may set back: other loops move theirs
        if _symbolic(new) and (mine or (move_refs and old is not None)):
            # a link, written back as an id without following it (a compare would follow it): the id it held,
            # or when that is unknown (the link stood before this snapshot) the id the link leads to
            to = old if old and not _symbolic(old) else git.run(workdir, "rev-parse", "--verify", "-q", ref,
                                                                   check=False).stdout
            r = git.run(workdir, "update-ref", "--no-deref", "-m", "healer: ref link set back", ref, to,
                        check=False) if to else None
            done.append({"ref": ref, "action": "restored", "to": to or None, "from": new,
                         "ok": r is not None and r.code == 0})
            continue
        if not move_refs:
            continue
        if new is not None and old is None:
            keep = f"refs/healer/quarantine/{run_id}/{n}/{ref}"
            if _symbolic(new):  # a new link: what it leads to is kept, the link itself set aside unfollowed
                to = git.run(workdir, "rev-parse", "--verify", "-q", ref, check=False).stdout
                if to:
                    git.run(workdir, "update-ref", "-m", "healer: ref made by an agent", keep, to, check=False)
                r = git.run(workdir, "update-ref", "--no-deref", "-d", ref, check=False)
            else:
                git.run(workdir, "update-ref", "-m", "healer: ref made by an agent", keep, new, check=False)
                r = git.run(workdir, "update-ref", "-d", ref, new, check=False)
            done.append({"ref": ref, "action": "quarantined", "saved_as": keep, "ok": r.code == 0})
        else:
            r = git.run(workdir, "update-ref", "-m", "healer: ref moved back", ref, old or zero, new or zero, check=False)
            done.append({"ref": ref, "action": "restored", "to": old, "from": new, "ok": r.code == 0})
    return done


# -- writes outside the worktree (unsandboxed agents) ---------------------------------------

@dataclass(frozen=True)
class Root:
    path: Path
    recursive: bool
    skip: tuple[Path, ...] = ()


def _meta(p: Path, st: os.stat_result, shallow: bool) -> tuple:
    if stat.S_ISDIR(st.st_mode):
        return ("d", st.st_ino) if shallow else ("d",)
    if stat.S_ISLNK(st.st_mode):
        return ("l", os.readlink(p))
    return ("f", st.st_size, st.st_mtime_ns, st.st_ino, stat.S_IMODE(st.st_mode))


def scan(roots: list[Root]) -> dict[str, tuple]:
    """path -> metadata of every entry under the roots (recursive ones walked, links not followed)."""
    out: dict[str, tuple] = {}
    for r in roots:
        skip = {str(s) for s in r.skip}
        try:
            it = os.scandir(r.path)
        except OSError:
            continue
        stack = [it]
        while stack:
            with stack.pop() as entries:
                for e in entries:
                    if len(out) >= CAP:
                        return out
                    if e.path in skip:
                        continue
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    out[e.path] = _meta(Path(e.path), st, not r.recursive)
                    if r.recursive and stat.S_ISDIR(st.st_mode):
                        try:
                            stack.append(os.scandir(e.path))
                        except OSError:
                            pass
    return out


def written(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def outside_roots(workdir: Path, fleet_root: Path | None, common: Path | None) -> list[Root]:
    """Where an unsandboxed agent's writes can be seen: the project that holds the worktree
    (recursively, but not its .git or .healer: git is checked above, .healer is healer's and
    the other agents'), the folder beside it, and $HOME's top level."""
    workdir = workdir.resolve()
    project = (fleet_root or workdir).resolve()
    roots: list[Root] = []
    if project != workdir:
        roots.append(Root(project, True, (project / ".git", project / ".healer", workdir)))
    roots.append(Root(project.parent, False, (project,)))
    home = Path(os.path.expanduser("~")).resolve()
    if home not in (project.parent, project) and home.is_dir():
        roots.append(Root(home, False, (project,)))
    return roots


# -- the run's own branch: only healer's commits -------------------------------------------

SHOWN_COMMITS = 50  # commits named in the event; all of them stay reachable from the quarantine ref


def set_commits_aside(workdir: Path, expected: str | None, now: str | None, keep: str, spare=()) -> dict:
    """The branch HEAD names holds `now` where healer left it at `expected` (the run's base): the agent
    committed (the real CLIs do by themselves), reset or deleted it. Its commits are kept reachable under
    `keep` (refs/healer/quarantine/<run>/<n>/agent) for audit, and the branch goes back to `expected` by
    compare-and-swap: what the agent committed stays in the working tree, where the loop measures, judges and
    commits it itself (on the base, as its only parent). Returns the `loop.agent_commits` payload."""
    commits: list[dict] = []
    if now:
        git.run(workdir, "update-ref", "-m", "healer: commits an agent made", keep, now, check=False)
        rng = [now] if expected is None else [now, f"^{expected}"]
        out = git.run(workdir, "log", f"--max-count={SHOWN_COMMITS}", "--format=%H%x1f%P%x1f%an <%ae>%x1f%s", *rng,
                      "--", check=False)
        for line in out.stdout.splitlines() if out.code == 0 else []:
            parts = line.split("\x1f")
            if len(parts) == 4:
                commits.append({"id": parts[0], "parents": parts[1].split(), "author": parts[2], "subject": parts[3][:200]})
    zero = "0" * 40
    if expected is None:
        r = git.run(workdir, "update-ref", "-d", "HEAD", now or zero, check=False)
    else:
        r = git.run(workdir, "update-ref", "-m", "healer: the agent's commits set aside", "HEAD", expected, now or zero,
                    check=False)
    if r.code == 0 and now and expected:
        # what the agent committed is unstaged again (the index as the base has it; the files stay as they are):
        # a user's next `git commit` must not commit it either. Paths the user had staged are theirs (`spare`)
        d = git.run(workdir, "diff-tree", "-r", "--name-only", "-z", "--no-renames", expected, now, check=False)
        paths = [p for p in d.stdout.split("\0") if p and p not in spare] if d.code == 0 else []
        for i in range(0, len(paths), 200):
            git.run(workdir, "reset", "-q", expected, "--", *(f":(literal){p}" for p in paths[i:i + 200]), check=False)
    return {"from": now, "to": expected, "saved_as": keep if now else None, "commits": commits,
            "moved_back": r.code == 0}
