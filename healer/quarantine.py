"""Quarantine: the healer's only way to make a file go away, and it is reversible.

A batch lives in `.healer/quarantine/<stamp>/`: the files under their original
relative paths and a `manifest.json` (path, size, sha256, reason, time, state).
The manifest is written BEFORE anything moves, so a crash at any point leaves either
the file in place or the file in quarantine with a manifest naming it; `restore`
puts it back byte for byte (checked by sha256) and never overwrites an existing file.

Within one filesystem a move is a rename (atomic, preserves mode and times); across
filesystems it is copy, verify the sha256, then unlink the original.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from healer import failpoints, switches
from healer.clock import Clock, stamp, system
from healer.errors import HealerError, NotFound
from healer.paths import UnsafePath, confine, relative

FP_AFTER_MANIFEST = failpoints.declare("quarantine.after_manifest", "healer/quarantine.py: manifest written, nothing moved yet")
FP_AFTER_COPY = failpoints.declare("quarantine.after_copy", "healer/quarantine.py: first file moved (or copied) into quarantine")
FP_AFTER_MOVE = failpoints.declare("quarantine.after_move", "healer/quarantine.py: every file moved, manifest not yet marked")

QDIR = ".healer/quarantine"
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Entry:
    id: str  # "<batch>/<original path>"
    batch: str
    path: str  # original path, relative to the fleet root
    stored: str  # where it sits now, relative to the batch folder
    size: int
    sha256: str
    reason: str
    time: float
    state: str  # pending (manifest written, not moved) | quarantined | restored
    link: str | None = None  # a symlink is quarantined as a link; this is its target
    intent: int | None = None
    restored_at: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def _qroot(root: str | Path) -> Path:
    return Path(root).resolve() / QDIR


def _digest(p: Path) -> tuple[int, str, str | None]:
    """(size, sha256, link target). A symlink is hashed by its target text, not followed."""
    if p.is_symlink():
        target = os.readlink(p)
        data = target.encode()
        return len(data), hashlib.sha256(data).hexdigest(), target
    mode = os.lstat(p).st_mode
    if not stat.S_ISREG(mode):
        # a FIFO or a socket an agent left: opening it could block for ever; it is named by its kind
        return 0, hashlib.sha256(f"special file, mode {mode:o}".encode()).hexdigest(), None
    h = hashlib.sha256()
    size = 0
    with os.fdopen(os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest(), None


def _write_manifest(batch_dir: Path, data: dict) -> None:
    tmp = batch_dir / (MANIFEST + ".tmp")
    with tmp.open("w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, batch_dir / MANIFEST)
    _fsync_dir(batch_dir)


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _read_manifest(batch_dir: Path) -> dict:
    with (batch_dir / MANIFEST).open() as f:
        return json.load(f)


def _new_batch(root: Path, now: float) -> Path:
    q = _qroot(root)
    q.mkdir(parents=True, exist_ok=True)
    base = stamp(now)
    for n in range(10_000):
        d = q / (base if n == 0 else f"{base}-{n}")
        try:
            d.mkdir()
            return d
        except FileExistsError:
            continue
    raise HealerError(f"{q}: cannot create a quarantine folder for {base}")


def _move(src: Path, dst: Path, sha: str) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(src, dst)
        return
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
    # across filesystems: copy, prove the copy, only then unlink the original
    if src.is_symlink():
        os.symlink(os.readlink(src), dst)
    else:
        shutil.copy2(src, dst)
        if _digest(dst)[1] != sha:
            dst.unlink()
            raise HealerError(f"{src}: the quarantine copy does not match the original; nothing removed")
    src.unlink()


def quarantine(root: str | Path, path: str | Path, reason: str, clock: Clock | None = None, *,
               intent: int | None = None) -> Entry:
    """Move one file into a new quarantine batch; returns its manifest entry."""
    return quarantine_many(root, [path], reason, clock, intent=intent)[0]


def quarantine_many(root: str | Path, paths: Iterable[str | Path], reason: str, clock: Clock | None = None, *,
                    intent: int | None = None) -> list[Entry]:
    """Move files (or symlinks) into ONE new batch. Folders are refused: quarantine their files."""
    if not switches.enabled("quarantine"):  # a game day proving its unknown-files scenarios can fail
        return []
    clock = clock or system()
    root_r = Path(root).resolve()
    items: list[tuple[Path, str, int, str, str | None]] = []
    seen: set[str] = set()
    for p in paths:
        full = confine(root_r, p, link_anywhere=True)  # a link is moved as a link, never followed
        if not full.is_symlink() and full.is_dir():
            raise UnsafePath(f"{p}: expected a file, got a folder; quarantine its files one by one")
        if not full.is_symlink() and not full.exists():
            raise NotFound(f"{p}: no such file to quarantine")
        rel = relative(root_r, full)
        if rel in seen:
            continue
        seen.add(rel)
        size, sha, link = _digest(full)
        items.append((full, rel, size, sha, link))
    if not items:
        return []
    now = clock.now()
    batch_dir = _new_batch(root_r, now)
    batch = batch_dir.name
    entries: list[dict[str, Any]] = []
    for _full, rel, size, sha, link in items:
        stored = rel if rel != MANIFEST and not rel.startswith(MANIFEST + ".") else f"_/{rel}"
        entries.append({"path": rel, "stored": stored, "size": size, "sha256": sha, "reason": reason, "time": now,
                        "state": "pending", "link": link, "intent": intent, "restored_at": None})
    manifest = {"batch": batch, "created": now, "reason": reason, "intent": intent, "entries": entries}
    _write_manifest(batch_dir, manifest)
    failpoints.hit(FP_AFTER_MANIFEST)
    for i, (full, _rel, _size, sha, _link) in enumerate(items):
        _move(full, batch_dir / entries[i]["stored"], sha)
        entries[i]["state"] = "quarantined"
        if i == 0:
            failpoints.hit(FP_AFTER_COPY)
    failpoints.hit(FP_AFTER_MOVE)
    _write_manifest(batch_dir, manifest)
    return [_entry(batch, e, batch_dir) for e in entries]


class BadManifest(HealerError):
    """A manifest that is not what healer writes: never trusted, skipped (one line), never fatal."""
    exit_code = 65


_STATES = ("pending", "quarantined", "restored")


def _inside_batch(batch_dir: Path, stored: str) -> Path:
    """`stored` resolved inside `batch_dir`, through real folders only (no `..`, no absolute path,
    no symlink on the way): a manifest names files in its own batch, nothing else."""
    parts = stored.split("/")
    if not stored or stored.startswith("/") or "\x00" in stored or any(x in ("", ".", "..") for x in parts):
        raise BadManifest(f"stored {stored!r}: expected a relative path inside the batch folder")
    cur = batch_dir
    for x in parts[:-1]:
        cur = cur / x
        if cur.is_symlink() or (os.path.lexists(cur) and not cur.is_dir()):
            raise BadManifest(f"stored {stored!r}: goes through {cur.name}, which is not a folder")
    return batch_dir / stored


def _entry(batch: str, e: object, batch_dir: Path) -> Entry:
    if not isinstance(e, dict):
        raise BadManifest(f"expected an entry object, got {type(e).__name__}")
    for key, types in (("path", str), ("stored", str), ("sha256", str)):
        if not isinstance(e.get(key), types):
            raise BadManifest(f"entry {key}: expected a string, got {e.get(key)!r}")
    size = e.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise BadManifest(f"entry {e['path']!r} size: expected a count of bytes, got {size!r}")
    if len(e["sha256"]) != 64 or any(c not in "0123456789abcdef" for c in e["sha256"]):
        raise BadManifest(f"entry {e['path']!r} sha256: expected 64 hex digits, got {e['sha256'][:20]!r}")
    rel = e["path"]
    if rel.startswith("/") or any(x in ("", ".", "..") for x in rel.split("/")) or "\x00" in rel:
        raise BadManifest(f"entry path {rel!r}: expected a path relative to the root, without '..'")
    state = e.get("state", "pending")
    if state not in _STATES:
        raise BadManifest(f"entry {rel!r} state: expected one of {', '.join(_STATES)}, got {state!r}")
    link = e.get("link")
    if link is not None and not isinstance(link, str):
        raise BadManifest(f"entry {rel!r} link: expected a string or null, got {link!r}")
    stored = _inside_batch(batch_dir, e["stored"])
    # the manifest is rewritten after the moves; a crash in between leaves "pending" for a file that moved
    if state == "pending" and (stored.exists() or stored.is_symlink()):
        state = "quarantined"
    try:
        t = float(e.get("time", 0.0) or 0.0)
        intent = None if e.get("intent") is None else int(e["intent"])
        restored_at = None if e.get("restored_at") is None else float(e["restored_at"])
    except (TypeError, ValueError) as err:
        raise BadManifest(f"entry {rel!r}: {err}") from None
    return Entry(id=f"{batch}/{rel}", batch=batch, path=rel, stored=e["stored"], size=size,
                 sha256=e["sha256"], reason=str(e.get("reason", "")), time=t, state=state,
                 link=link, intent=intent, restored_at=restored_at)


def _batch_entries(d: Path) -> list[Entry]:
    """Every entry of one batch folder; BadManifest (one line) when anything in it is off."""
    if d.is_symlink() or not d.is_dir():
        raise BadManifest(f"{d.name}: expected a batch folder, got a link or a file")
    try:
        m = _read_manifest(d)
    except (OSError, ValueError) as e:
        raise BadManifest(f"unreadable manifest ({type(e).__name__}: {str(e)[:80]})") from None
    if not isinstance(m, dict) or not isinstance(m.get("entries", []), list):
        raise BadManifest("expected an object with a list of entries")
    return [_entry(d.name, e, d) for e in m.get("entries", [])]


def entries(root: str | Path, *, include_pending: bool = False, bad: list[str] | None = None) -> list[Entry]:
    """Every entry of every batch, oldest first. `pending` ones (never moved) are hidden by default.
    A batch whose manifest is not valid is skipped whole; its one-line reason goes to `bad`."""
    q = _qroot(root)
    if not q.is_dir() or q.is_symlink():
        return []
    out: list[Entry] = []
    for d in sorted(q.iterdir()):
        if not (d / MANIFEST).is_file() and not (d / MANIFEST).is_symlink():
            continue
        try:
            batch = _batch_entries(d)
        except BadManifest as e:
            if bad is not None:
                bad.append(f"{d / MANIFEST}: skipped: {e}")
            continue
        out += [ent for ent in batch if ent.state != "pending" or include_pending]
    return out


def find(root: str | Path, path: str | Path) -> Entry | None:
    """The latest quarantined (not restored) entry for an original path."""
    root_r = Path(root).resolve()
    try:
        rel = relative(root_r, confine(root_r, path))
    except UnsafePath:
        rel = str(path)
    hits = [e for e in entries(root_r) if e.path == rel and e.state == "quarantined"]
    return hits[-1] if hits else None


def _select(root: Path, id_or_path: str) -> list[Entry]:
    bad: list[str] = []
    all_ = entries(root, bad=bad)
    name = id_or_path.strip("/").split("/")[0]
    for line in bad:
        if f"/{name}/{MANIFEST}:" in line:
            raise BadManifest(line)
    if "/" not in id_or_path.strip("/"):
        batch = [e for e in all_ if e.batch == id_or_path]
        if batch:
            return batch
    exact = [e for e in all_ if e.id == id_or_path]
    if exact:
        return exact
    e = find(root, id_or_path)
    if e is None:
        raise NotFound(f"{id_or_path}: no quarantined file or batch by that id or path (see 'healer quarantine list')")
    return [e]


def restore(root: str | Path, id_or_path: str, clock: Clock | None = None) -> list[Entry]:
    """Put quarantined files back where they were, byte for byte. Refuses to overwrite anything."""
    clock = clock or system()
    root_r = Path(root).resolve()
    chosen = [e for e in _select(root_r, id_or_path) if e.state == "quarantined"]
    if not chosen:
        raise HealerError(f"{id_or_path}: already restored", 64)
    # check everything first, so a batch is restored whole or not at all
    for e in chosen:
        src = _inside_batch(_qroot(root_r) / e.batch, e.stored)
        if not (src.exists() or src.is_symlink()):
            raise HealerError(f"{e.id}: the quarantined copy is missing from {src}")
        size, sha, _ = _digest(src)
        if sha != e.sha256:
            raise HealerError(f"{e.id}: the quarantined copy's sha256 {sha[:12]}… does not match the manifest's {e.sha256[:12]}…; not restoring")
        dst = confine(root_r, e.path)
        if dst.exists() or dst.is_symlink():
            raise HealerError(f"{e.path}: a file already exists there; refusing to overwrite it (move it away, then restore {e.id})", 64)
    done: list[Entry] = []
    by_batch: dict[str, list[Entry]] = {}
    for e in chosen:
        by_batch.setdefault(e.batch, []).append(e)
    for batch, group in by_batch.items():
        batch_dir = _qroot(root_r) / batch
        manifest = _read_manifest(batch_dir)
        for e in group:
            src = _inside_batch(batch_dir, e.stored)
            dst = confine(root_r, e.path)
            _move(src, dst, e.sha256)
            for raw in manifest["entries"]:
                if isinstance(raw, dict) and raw.get("path") == e.path:
                    raw["state"] = "restored"
                    raw["restored_at"] = clock.now()
            done.append(Entry(**{**asdict(e), "state": "restored", "restored_at": clock.now()}))
        _write_manifest(batch_dir, manifest)
    return done


def sha256_of(path: str | Path) -> str:
    return _digest(Path(path))[1]
