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
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from healer import failpoints
from healer.clock import Clock, stamp, system
from healer.errors import HealerError, NotFound
from healer.remedy.paths import UnsafePath, confine, relative

FP_AFTER_MANIFEST = failpoints.declare("quarantine.after_manifest", "healer/remedy/quarantine.py: manifest written, nothing moved yet")
FP_AFTER_COPY = failpoints.declare("quarantine.after_copy", "healer/remedy/quarantine.py: first file moved (or copied) into quarantine")
FP_AFTER_MOVE = failpoints.declare("quarantine.after_move", "healer/remedy/quarantine.py: every file moved, manifest not yet marked")

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
    h = hashlib.sha256()
    size = 0
    with p.open("rb") as f:
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
    clock = clock or system()
    root_r = Path(root).resolve()
    items: list[tuple[Path, str, int, str, str | None]] = []
    seen: set[str] = set()
    for p in paths:
        full = confine(root_r, p)
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
    entries = []
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


def _entry(batch: str, e: dict, batch_dir: Path) -> Entry:
    state = e.get("state", "pending")
    stored = batch_dir / e["stored"]
    # the manifest is rewritten after the moves; a crash in between leaves "pending" for a file that moved
    if state == "pending" and (stored.exists() or stored.is_symlink()):
        state = "quarantined"
    return Entry(id=f"{batch}/{e['path']}", batch=batch, path=e["path"], stored=e["stored"], size=int(e["size"]),
                 sha256=e["sha256"], reason=e.get("reason", ""), time=float(e.get("time", 0.0)), state=state,
                 link=e.get("link"), intent=e.get("intent"), restored_at=e.get("restored_at"))


def entries(root: str | Path, *, include_pending: bool = False) -> list[Entry]:
    """Every entry of every batch, oldest first. `pending` ones (never moved) are hidden by default."""
    q = _qroot(root)
    if not q.is_dir():
        return []
    out: list[Entry] = []
    for d in sorted(q.iterdir()):
        if not (d / MANIFEST).is_file():
            continue
        try:
            m = _read_manifest(d)
        except (OSError, ValueError):
            continue
        for e in m.get("entries", []):
            ent = _entry(d.name, e, d)
            if ent.state != "pending" or include_pending:
                out.append(ent)
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
    all_ = entries(root)
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
        src = _qroot(root_r) / e.batch / e.stored
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
            src = batch_dir / e.stored
            dst = confine(root_r, e.path)
            _move(src, dst, e.sha256)
            for raw in manifest["entries"]:
                if raw["path"] == e.path:
                    raw["state"] = "restored"
                    raw["restored_at"] = clock.now()
            done.append(Entry(**{**asdict(e), "state": "restored", "restored_at": clock.now()}))
        _write_manifest(batch_dir, manifest)
    return done


def sha256_of(path: str | Path) -> str:
    return _digest(Path(path))[1]
