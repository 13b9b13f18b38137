"""Protected paths: what the agent may not change, compared before and after it ran, and put back.

Nothing here deletes: a file that must go is moved to quarantine (restorable byte for byte), a file that existed
before is written back from the snapshot taken before the agent ran, after its current bytes went to quarantine.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from healer import digest, walk
from healer.errors import HealerError
from healer.files import write_atomic
from healer.git import raw
from healer.guarded import protected  # noqa: F401 - one matcher, re-exported for the loop's callers
from healer.loop.loose import _blob_id

PROTECTED_CAP = 50_000  # entries per walk: a huge protected folder is compared in part, never for ever


def protected_on_disk(cwd: Path, patterns: Sequence[str]) -> dict[str, tuple]:
    """Every file and link at the protected paths as the disk has them, ignored ones too: git's view (the
    snapshot) leaves out what .gitignore names, so an agent could add `tests/conftest.py` and the ignore line
    for it and no diff would show the change. path -> (mode, size, mtime_ns, ctime_ns, inode). Globs are
    git's to see. `__pycache__` is left out: an agent that runs the tests itself rewrites it every iteration
    (a forged .pyc is a known limit, docs/security.md)."""
    out: dict[str, tuple] = {}
    for pat in patterns:
        pat = (pat[2:] if pat.startswith("./") else pat).rstrip("/")
        if not pat or any(c in pat for c in "*?[") or ".." in pat.split("/"):
            continue
        top = os.path.join(cwd, pat)
        try:
            st = os.lstat(top)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            out[pat] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            continue
        got = walk.walk(top, entries=max(0, PROTECTED_CAP - len(out)), prune=lambda _r, n: n == "__pycache__")
        for r, st in got.entries:
            if not stat.S_ISDIR(st.st_mode):
                out[f"{pat}/{r}"] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        for r in got.over:  # too deep to read: the folder that holds it, under the protected one, counts as one
            if r:           # entry: one the agent made differs from before, and is set aside whole
                out[f"{pat}/{r.split('/', 1)[0]}"] = ("deep",)
        if len(out) >= PROTECTED_CAP:
            return out
    return out


def hidden_changes(cwd: Path, tree: str, before: dict[str, tuple], after: dict[str, tuple], known: set[str]) -> list[str]:
    """The protected paths that changed on disk (`protected_on_disk` before and after) where git, whose
    snapshot `tree` is, does not show it: ignored ones, and the ones `tree` holds with other content than
    the disk's, or that are gone from disk (an index flag the agent set, see _unflag). A file whose content
    is still the tree's (touched, rewritten the same) is not one."""
    cand = sorted(p for p in {*after, *before} if before.get(p) != after.get(p) and p not in known)
    if not cand:
        return []
    seen = _entries(cwd, tree, cand)
    return [p for p in cand if (p in after and p not in seen) or (p in seen and not _disk_is(cwd, p, *seen[p]))]


def _disk_is(cwd: Path, path: str, mode: str, blob: str) -> bool:
    """The disk holds `path` as the tree entry (mode, blob) says, by object id: the file's own bytes hashed
    as git hashes a blob, with no filter or attribute in between."""
    full = os.path.join(cwd, path)
    try:
        st = os.lstat(full)
    except OSError:
        return False
    if stat.S_ISLNK(st.st_mode):
        target = os.fsencode(os.readlink(full))
        return mode == "120000" and digest.sha1(b"blob %d\0" % len(target) + target).hexdigest() == blob
    if not stat.S_ISREG(st.st_mode) or mode not in ("100644", "100755"):
        return False
    # the bytes on disk, hashed as a blob: never through a filter or conversion (an attribute or config the
    # agent wrote could make `hash-object` store the intact test while the gates run the gutted one)
    return _blob_id(Path(full)) == blob


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


def _blocker(cwd: Path, rel: str) -> str | None:
    """The first folder on `rel`'s way that is not a real folder (a symlink, or a file in its
    place), relative to `cwd`; None when the way is clear. Nothing is followed."""
    parts = rel.split("/")
    for i in range(1, len(parts)):
        a = "/".join(parts[:i])
        p = cwd / a
        if p.is_symlink() or (os.path.lexists(p) and not p.is_dir()):
            return a
    return None


def put_back(cwd: str | Path, tree: str, paths: Iterable[str], quarantine: Path, reason: str,
             clock=None) -> list[Moved]:
    """Return `paths` to their content in snapshot `tree` (the tree before the agent ran).
    Every changed file present on disk first moves to quarantine (restorable byte for
    byte); files that existed in `tree` are then written back from git's objects. Links are
    never followed: a symlink anywhere on a path (`tests -> /elsewhere`) is quarantined as a
    link and a real folder takes its place. The real index, HEAD and refs are not touched."""
    cwd = Path(cwd)
    paths = sorted(set(paths))
    if not paths:
        return []
    before = _entries(cwd, tree, paths)
    blockers = {b for p in paths if (b := _blocker(cwd, p))}
    present = [p for p in paths if not any(p == b or p.startswith(b + "/") for b in blockers)
               and os.path.lexists(cwd / p)]
    saved = _quarantine(cwd, sorted(blockers) + present, quarantine, reason, clock)
    moved: list[Moved] = []
    for p in paths:
        if p in before:
            mode, blob = before[p]
            if mode == "160000":  # a submodule: nothing to write
                continue
            _write_entry(cwd, p, mode, raw(cwd, "cat-file", "blob", blob), quarantine, reason, clock)
            moved.append(Moved(p, "restored", saved.get(p)))
        else:
            moved.append(Moved(p, "quarantined", saved.get(p)))
    for b in sorted(blockers - set(paths)):
        moved.append(Moved(b, "quarantined", saved.get(b)))
    return moved


def _write_entry(cwd: Path, rel: str, mode: str, data: bytes, quarantine: Path, reason: str, clock) -> None:
    """Create `rel` afresh with `data`, through real folders only (never through a link)."""
    b = _blocker(cwd, rel)
    if b is not None:  # appeared since (a leftover process): moved away like the others
        _quarantine(cwd, [b], quarantine, reason, clock)
    parent = (cwd / rel).parent
    parent.mkdir(parents=True, exist_ok=True)
    dst = cwd / rel
    if dst.is_dir() and not dst.is_symlink():
        try:
            os.rmdir(dst)  # an empty folder in the file's place (its files went to quarantine)
        except OSError:
            _quarantine_dir(dst, quarantine / rel)
    elif os.path.lexists(dst):
        _quarantine(cwd, [rel], quarantine, reason, clock)
    if mode == "120000":
        os.symlink(data.decode("utf-8", "surrogateescape"), dst)
        return
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if mode == "100755" else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(dst, 0o755 if mode == "100755" else 0o644, follow_symlinks=False)


def _quarantine_dir(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(dst):
        dst = dst.with_name(dst.name + f".{os.getpid()}")
    shutil.move(str(src), str(dst))


def set_aside(cwd: Path, rel: str, fallback_dir: Path, reason: str, clock) -> str | None:
    """Whatever stands at `rel` (a link, a FIFO, a folder, a file), moved into quarantine; where it went."""
    return _quarantine(cwd, [rel], fallback_dir, reason, clock).get(rel)


def _quarantine(cwd: Path, paths: list[str], fallback_dir: Path, reason: str, clock) -> dict[str, str]:
    """Move files into the fleet's quarantine (`healer quarantine list|restore` sees them);
    a file it refuses (e.g. a symlink leading outside the tree) goes to `fallback_dir`
    with a MANIFEST.json."""
    if not paths:
        return {}
    # here, not at module level: the quarantine (with dataclasses and hashlib) is +7-20 ms of CPU per loop start
    # (2026-12-05, 15 paired starts, loaded machine) and only a run that moves something needs it
    from healer.quarantine import quarantine_many  # lazy: healer.quarantine: 11 ms of `loop run`'s start

    try:
        entries = quarantine_many(cwd, paths, reason, clock)
        q = cwd / ".healer" / "quarantine"
        return {e.path: str(q / e.batch / e.stored) for e in entries}
    except HealerError:
        pass
    out: dict[str, str] = {}
    manifest: list[dict] = []
    for p in paths:
        src, dst = cwd / p, fallback_dir / p
        if _blocker(fallback_dir, p) is not None:  # a link quarantined earlier sits on the way: never go through it
            dst = fallback_dir / "_flat" / p.replace("/", "%2F")
        dst.parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(dst):
            dst = dst.with_name(dst.name + f".{len(manifest)}-{os.getpid()}")
        sha = _blob_id(src)
        if _same_fs(src, dst):
            os.replace(src, dst)
        else:
            shutil.move(str(src), str(dst))
        out[p] = str(dst)
        manifest.append({"path": p, "saved_as": str(dst), "reason": reason, "git_blob": sha})
    _add_to_manifest(fallback_dir / "MANIFEST.json", manifest)
    return out


def _add_to_manifest(mf: Path, entries: list[dict]) -> None:
    """Append to the fallback folder's MANIFEST.json, renamed into place: a crash or a full disk mid-write
    leaves the old one whole. One cut short by an older healer is kept beside it, never dropped."""
    try:
        old = json.loads(mf.read_text())
        if not isinstance(old, list):
            raise ValueError("not a list")
    except FileNotFoundError:
        old = []
    except (OSError, ValueError):
        os.replace(mf, mf.with_name(f"{mf.name}.unreadable-{os.getpid()}"))
        old = []
    write_atomic(mf, json.dumps(old + entries, indent=2) + "\n")


def _same_fs(a: Path, b: Path) -> bool:
    try:
        return os.stat(a.parent).st_dev == os.stat(b.parent).st_dev
    except OSError:
        return False


def set_aside_fast(cwd: str | Path, tree: str, paths: Sequence[str], quarantine: Path) -> int:
    """An oversized change rolled back without reading it: every path renamed into `quarantine` (same file
    system: the iteration's folder in the worktree; nothing hashed, nothing copied, nothing deleted, listed in
    its MANIFEST.json), then the files `tree` holds written back from git. Returns how many were moved."""
    cwd = Path(cwd)
    plan = [{"path": p, "saved_as": str(quarantine / "oversize" / p), "reason": "oversize"} for p in paths
            if _blocker(cwd, p) is None and os.path.lexists(cwd / p)]
    if not plan:
        return 0
    # the record first: a disk too full to write it (an agent that filled it) moves nothing (exit 74 follows)
    quarantine.mkdir(parents=True, exist_ok=True)
    _add_to_manifest(quarantine / "MANIFEST.json", plan)
    moved: list[dict] = []
    for m in plan:
        dst = Path(m["saved_as"])
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.rename(cwd / m["path"], dst)
        except OSError:
            continue
        moved.append(m)
    if moved:
        have = _entries(cwd, tree, [m["path"] for m in moved])
        for p, (mode, blob) in have.items():
            if mode != "160000":
                _write_entry(cwd, p, mode, raw(cwd, "cat-file", "blob", blob), quarantine, "oversize", None)
    return len(moved)
