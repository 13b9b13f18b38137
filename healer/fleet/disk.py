"""Disk pressure, the shell: measure free space where the fleet writes, keep a reserve, reclaim healer's own.

The decisions are healer/core/disk.py's. `DiskWatch.guard()` runs at the start of every dispatch pass,
before the pass's first store write (a full disk refuses even the lease renewal): it measures and releases
or makes the reserve, touching no store. The pass then records what changed and, while low, reclaims.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from loguru import logger

from healer import conventions as cv
from healer import lifecycle
from healer.core import disk as disk_rules
from healer.fleet.ports import real_disk_free

RESERVE_NAME = "disk.reserve"
_FINISHED = (lifecycle.DONE, lifecycle.CLOSED)


class DiskWatch:
    def __init__(self, root: Path, store_path: str | None, min_free: int, free=None) -> None:
        self.free = free or real_disk_free  # the port: (file system id, bytes free) of a folder, or None
        self.root = Path(root)
        self.min_free = int(min_free)
        local = store_path is not None and store_path not in ("", ":memory:") and "://" not in store_path
        self.store_dir = Path(store_path).parent if store_path is not None and local else None  # PostgreSQL's disk is its server's
        self.reserve = self.root / ".healer" / RESERVE_NAME

    def paths(self) -> list[Path]:
        """The store's folder first (the reserve stands there), then the worktrees' and the fleet's own."""
        out = [p for p in (self.store_dir, self.root / ".healer" / "worktrees", self.root / ".healer") if p is not None]
        return out

    def measure(self) -> list[disk_rules.Reading]:
        seen: set[int] = set()
        out = []
        for p in self.paths():
            got = self.free(p)
            if got is None or got[0] in seen:
                continue  # not made yet (no worktree so far), gone, or a file system measured already
            seen.add(got[0])
            out.append(disk_rules.Reading(str(p), got[1]))
        return out

    def guard(self) -> list[disk_rules.Reading]:
        """Measure, and release or make the reserve; never raises, never writes the store."""
        if self.min_free <= 0:
            return []
        try:
            readings = self.measure()
            act = disk_rules.reserve_action(readings, self.min_free, self.reserve.exists())
            if act == "release":
                self.reserve.unlink(missing_ok=True)  # healer's own preallocated file: room for the store to checkpoint
                logger.warning("disk low: released the {} reserve ({})", self.reserve,
                               ", ".join(f"{r.path}: {r.free} bytes free" for r in readings))
                readings = self.measure()
            elif act == "make":
                self._make_reserve(disk_rules.reserve_size(self.min_free))
            return readings
        except Exception as e:  # noqa: BLE001 - measuring is advice; the pass goes on without it
            logger.debug("disk guard failed: {}", e)
            return []

    def _make_reserve(self, size: int) -> None:
        tmp = self.reserve.with_name(RESERVE_NAME + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.posix_fallocate(fd, 0, size)  # real blocks (a sparse file would reserve nothing)
            finally:
                os.close(fd)
            os.replace(tmp, self.reserve)
        except OSError:
            tmp.unlink(missing_ok=True)

    # -- reclaiming -----------------------------------------------------------------------
    def reclaimable(self, store) -> list[Path]:
        """healer's own files of finished tickets: their run folders (in their worktrees) and agent logs."""
        out: list[Path] = []
        logs = self.root / ".healer" / "logs" / "agents"
        for t in store.tickets(states=list(_FINISHED)):
            wt = Path((t.data or {}).get("worktree") or cv.worktree_for(self.root, t.id))
            runs = wt / ".healer" / "runs"
            if _own(runs, wt) and runs.is_dir():
                out += sorted(p for p in runs.iterdir() if _own(p, wt) and p.is_dir())
            if logs.is_dir():
                out += sorted(p for p in logs.glob(f"agent-{t.id}-*.log") if _own(p, logs))
        return out

    def reclaim(self, store) -> tuple[list[str], int]:
        """Journal first (`dispatch.disk_reclaimed` lists every path and the bytes), then delete; ([], 0) when nothing
        is to be reclaimed or the journal refused the entry (then nothing is deleted)."""
        paths = self.reclaimable(store)
        if not paths:
            return [], 0
        size = sum(_size(p) for p in paths)
        store.append("dispatch.disk_reclaimed", "fleet", {"paths": [str(p) for p in paths][:500], "count": len(paths), "bytes": size,
                                                 "why": "disk below fleet.min_free: run folders and agent logs of "
                                                        "finished tickets"})
        for p in paths:
            try:
                if p.is_dir():
                    shutil.rmtree(p)
                else:
                    p.unlink()
            except OSError as e:
                logger.warning("could not reclaim {}: {}", p, e)
        return [str(p) for p in paths], size


def _own(p: Path, inside: Path) -> bool:
    """Inside `inside` with no symbolic link on the way: an agent's link never leads a deletion elsewhere."""
    try:
        return not p.is_symlink() and os.path.realpath(p).startswith(os.path.realpath(inside) + os.sep) \
            and os.path.realpath(p) == os.path.abspath(p)
    except OSError:
        return False


def _size(p: Path) -> int:
    try:
        if p.is_file():
            return p.stat().st_size
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink())
    except OSError:
        return 0
