"""Git for the governed loop: measure the working tree, put back what must not change, commit.

Nothing here deletes: a file that must go is moved to quarantine (restorable byte for
byte), a file that existed before is written back from the snapshot taken before the
agent ran, after its current bytes went to quarantine. No `reset --hard`, no force.
Git itself runs through healer.git.

The loop's own files (LOOP_FILES at the working-tree root, and everything under
.healer/) never count: not in the state hash, not in the diff cap, not as protected
paths, and they are never committed by the loop.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from healer.errors import HealerError
from healer.git import GitError, raw, rev, run

LOOP_FILES = ("progress.md", "lessons.md")
HEALER_DIR = ".healer"
COMMIT_SUBJECT = "loop: goal reached at iteration {n}"
TIMEOUT = 300.0  # `add -A` of a large tree


_git_dirs: dict[Path, tuple[Path, Path]] = {}


def _read_ref(git_dir: Path, common: Path, ref: str) -> str | None:
    for base in (git_dir, common):
        try:
            return (base / ref).read_text().strip() or None
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            continue
    try:
        for line in (common / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref) and not line.startswith(("#", "^")):
                return line.split(" ", 1)[0]
    except FileNotFoundError:
        pass
    return None


def head(cwd: str | Path) -> str | None:
    """The commit HEAD points at (None in a repository without commits). Read from the
    files when they are plain (a loop reads HEAD often; a git process costs milliseconds)."""
    cwd = Path(cwd)
    try:
        if cwd not in _git_dirs:
            out = run(cwd, "rev-parse", "--git-dir", "--git-common-dir").stdout.split("\n")
            gd, cd = (Path(x) if Path(x).is_absolute() else cwd / x for x in out[:2])
            _git_dirs[cwd] = (gd, cd)
        gd, cd = _git_dirs[cwd]
        text = (gd / "HEAD").read_text().strip()
        if text.startswith("ref: "):
            sha = _read_ref(gd, cd, text[5:])
        else:
            sha = text
        if sha is None or len(sha) in (40, 64):
            return sha
    except (OSError, GitError, ValueError):
        pass
    return run(cwd, "rev-parse", "--verify", "-q", "HEAD", check=False).stdout or None


def subject(cwd: str | Path, rev: str = "HEAD") -> str:
    return run(cwd, "log", "-1", "--format=%s", rev, check=False).stdout


def is_loop_file(path: str) -> bool:
    return path in LOOP_FILES or path == HEALER_DIR or path.startswith(HEALER_DIR + "/")


_ignored_dirs: set[Path] = set()


def ignore_own_dir(cwd: str | Path) -> None:
    """Make sure git never sees .healer/, even in a repository that does not ignore it."""
    d = Path(cwd) / HEALER_DIR
    gi = d / ".gitignore"
    if gi in _ignored_dirs and gi.exists():
        return
    d.mkdir(parents=True, exist_ok=True)
    if not gi.exists():
        gi.write_text("# healer's own files: never part of the work\n*\n")
    _ignored_dirs.add(gi)


def _split0(data: bytes) -> list[str]:
    return [p.decode("utf-8", "surrogateescape") for p in data.split(b"\0") if p]


def _blob_id(path: Path) -> str:
    """Git's blob id of a file on disk, so a file hashes the same committed or not."""
    try:
        if path.is_symlink():
            data = os.readlink(path).encode("utf-8", "surrogateescape")
        else:
            data = path.read_bytes()
    except FileNotFoundError:
        return "deleted"
    except (IsADirectoryError, PermissionError, OSError):
        return "unreadable"
    h = hashlib.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


_index_paths: dict[Path, Path] = {}
_scratch_from: dict[Path, tuple | None] = {}


def _index_path(cwd: Path) -> Path:
    if cwd not in _index_paths:
        p = Path(run(cwd, "rev-parse", "--git-path", "index").stdout)
        _index_paths[cwd] = p if p.is_absolute() else cwd / p
    return _index_paths[cwd]


def snapshot(cwd: str | Path) -> str:
    """The working tree's content as a git tree id: tracked files and untracked files that
    are not ignored, the loop's own files left out. Built in a scratch index (a copy of the
    real one, so only changed files are hashed); the real index, HEAD and refs are not
    touched. Same bytes at the same paths -> same id, whatever was committed or staged."""
    cwd = Path(cwd)
    ignore_own_dir(cwd)
    scratch = cwd / HEALER_DIR / "snapshot.index"
    real = _index_path(cwd)
    # `add -A` brings the scratch index in line with the tree whatever it held, so it is
    # copied from the real index only when that one changed (its stat cache saves hashing)
    try:
        rs = os.stat(real)
        key = (rs.st_mtime_ns, rs.st_size, rs.st_ino)
    except FileNotFoundError:
        key = None
    if key is None or _scratch_from.get(cwd) != key or not scratch.exists():
        if key is None:
            scratch.unlink(missing_ok=True)
        else:
            shutil.copyfile(real, scratch)
        _scratch_from[cwd] = key
    env = {"GIT_INDEX_FILE": str(scratch)}
    # the loop's files stay out: excluded from `add` (a tracked one keeps its indexed version,
    # so the loop writing it never moves the hash)
    own = [f for f in LOOP_FILES if (cwd / f).exists()]
    r = run(cwd, "add", "-A", "--", ":/", *(f":(exclude,top){f}" for f in own), check=False, env=env, timeout=TIMEOUT)
    if r.code != 0:
        # git refuses to name an ignored file even in an exclude; ignored files are not added anyway
        run(cwd, "add", "-A", "--", ":/", env=env, timeout=TIMEOUT)
    return run(cwd, "write-tree", env=env).stdout


def state(cwd: str | Path) -> tuple[str | None, str | None]:
    """(HEAD, state hash of HEAD + snapshot); (None, None) when the worktree is gone.

    The fleet counts resumes on the same state with it: the loop's own files are left
    out of the snapshot, since a resumed loop rewrites progress.md every time and that
    must not pass for progress."""
    if not Path(cwd).is_dir():
        return None, None
    try:
        sha, tree = rev(cwd), snapshot(cwd)
    except GitError:
        return None, None
    return sha, hashlib.sha256(f"{sha}:{tree}".encode()).hexdigest()[:16]


def changed_between(cwd: str | Path, before: str, after: str) -> list[str]:
    """Paths whose content differs between two snapshots (added, modified, deleted)."""
    if before == after:
        return []
    out = raw(cwd, "diff-tree", "-r", "-z", "--name-only", "--no-renames", before, after)
    return sorted(p for p in _split0(out) if not is_loop_file(p))


def diff_lines(cwd: str | Path, before: str, after: str) -> int:
    """Lines added + removed between two snapshots; a binary file counts 1."""
    if before == after:
        return 0
    out = raw(cwd, "diff-tree", "-r", "-z", "--numstat", "--no-renames", before, after)
    total = 0
    for rec in _split0(out):
        parts = rec.split("\t", 2)
        if len(parts) < 3 or is_loop_file(parts[2]):
            continue
        total += 1 if parts[0] == "-" else int(parts[0]) + int(parts[1])
    return total


def protected(path: str, patterns: Sequence[str]) -> bool:
    for pat in patterns:
        pat = pat[2:] if pat.startswith("./") else pat
        if not pat:
            continue
        if pat.endswith("/"):
            if path.startswith(pat) or path == pat.rstrip("/"):
                return True
        elif path == pat or path.startswith(pat + "/") or fnmatch.fnmatchcase(path, pat):
            return True
    return False


@dataclass(frozen=True)
class Moved:
    path: str
    action: str  # "restored" (tracked: put back from base) or "quarantined" (new file moved away)
    saved_as: str | None  # where the agent's bytes now are


def _entries(cwd: Path, tree: str, paths: Sequence[str]) -> dict[str, tuple[str, str]]:
    """path -> (mode, blob) in `tree`, for the paths that exist there."""
    out: dict[str, tuple[str, str]] = {}
    for i in range(0, len(paths), 200):
        chunk = list(paths[i:i + 200])
        for rec in raw(cwd, "ls-tree", "-r", "-z", "--full-tree", tree, "--", *chunk).split(b"\0"):
            if not rec:
                continue
            meta, _, path = rec.partition(b"\t")
            mode, _typ, blob = meta.decode().split()
            out[path.decode("utf-8", "surrogateescape")] = (mode, blob)
    return out


def put_back(cwd: str | Path, tree: str, paths: Iterable[str], quarantine: Path, reason: str,
             clock=None) -> list[Moved]:
    """Return `paths` to their content in snapshot `tree` (the tree before the agent ran).
    Every changed file present on disk first moves to quarantine (restorable byte for
    byte); files that existed in `tree` are then written back from it. The real index,
    HEAD and refs are not touched."""
    cwd = Path(cwd)
    paths = sorted(set(paths))
    if not paths:
        return []
    before = _entries(cwd, tree, paths)
    present = [p for p in paths if (cwd / p).exists() or (cwd / p).is_symlink()]
    saved = _quarantine(cwd, present, quarantine, reason, clock)
    moved: list[Moved] = []
    for p in paths:
        if p in before:
            mode, blob = before[p]
            dst = cwd / p
            dst.parent.mkdir(parents=True, exist_ok=True)
            if mode == "160000":  # a submodule: nothing to write
                continue
            data = raw(cwd, "cat-file", "blob", blob)
            if mode == "120000":
                os.symlink(data.decode("utf-8", "surrogateescape"), dst)
            else:
                dst.write_bytes(data)
                os.chmod(dst, 0o755 if mode == "100755" else 0o644)
            moved.append(Moved(p, "restored", saved.get(p)))
        else:
            moved.append(Moved(p, "quarantined", saved.get(p)))
    return moved


def _quarantine(cwd: Path, paths: list[str], fallback_dir: Path, reason: str, clock) -> dict[str, str]:
    """Move files into the fleet's quarantine (`healer quarantine list|restore` sees them);
    a file it refuses (e.g. a symlink leading outside the tree) goes to `fallback_dir`
    with a MANIFEST.json."""
    if not paths:
        return {}
    from healer.remedy.quarantine import quarantine_many  # lazily: remedy is the supervisor's side

    try:
        entries = quarantine_many(cwd, paths, reason, clock)
        q = cwd / ".healer" / "quarantine"
        return {e.path: str(q / e.batch / e.stored) for e in entries}
    except HealerError:
        pass
    out: dict[str, str] = {}
    manifest = []
    for p in paths:
        src, dst = cwd / p, fallback_dir / p
        dst.parent.mkdir(parents=True, exist_ok=True)
        sha = _blob_id(src)
        if _same_fs(src, dst):
            os.replace(src, dst)
        else:
            shutil.move(str(src), str(dst))
        out[p] = str(dst)
        manifest.append({"path": p, "saved_as": str(dst), "reason": reason, "git_blob": sha})
    mf = fallback_dir / "MANIFEST.json"
    old = json.loads(mf.read_text()) if mf.exists() else []
    mf.write_text(json.dumps(old + manifest, indent=2) + "\n")
    return out


def _same_fs(a: Path, b: Path) -> bool:
    try:
        return os.stat(a.parent).st_dev == os.stat(b.parent).st_dev
    except OSError:
        return False


def commit_all(cwd: str | Path, message: str) -> str | None:
    """Stage everything git does not ignore (never the loop's own files) and commit.
    Returns the new commit, or None when there was nothing to commit."""
    cwd = Path(cwd)
    run(cwd, "add", "-A", "--", ":/", timeout=TIMEOUT)
    staged = _split0(raw(cwd, "diff", "--cached", "--name-only", "-z"))
    own = [p for p in staged if p in LOOP_FILES]
    if own:
        if head(cwd):
            run(cwd, "restore", "--staged", "--", *(f":(top){f}" for f in own))
        else:  # no commit yet: nothing to restore from, just unstage
            run(cwd, "rm", "--cached", "-q", "--", *(f":(top){f}" for f in own))
    if len(own) == len(staged):
        return None
    # the user's own identity when they have one: the loop commits in their tree
    r = run(cwd, "commit", "-q", "-m", message, check=False, timeout=TIMEOUT)
    if r.code != 0 and not run(cwd, "config", "user.email", check=False).stdout:
        # no identity configured on this machine: commit as the loop rather than fail the run
        run(cwd, "-c", "user.email=healer@localhost", "-c", "user.name=healer loop", "commit", "-q", "-m", message, timeout=TIMEOUT)
    elif r.code != 0:
        raise GitError(f"git commit failed in {cwd}: {r.text[-300:]}")
    return head(cwd)
