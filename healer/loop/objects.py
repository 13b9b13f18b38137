"""The sandboxed programs' own object directory: they read the repository's objects, and write only here.

git never checks a loose object's content against its name when it reads one, and the folders of
`objects/` must be writable to commit. An agent with that store writable could replace the blob of
`main:tests/check.py` under its own id: every later checkout (the merge gates', a new worktree, a
user's) would read the gutted test, and nothing compared by id would differ. So the repository's
`objects/` stays read-only in the sandbox; the agent's and the gates' git write to a folder of the
run's own (`GIT_OBJECT_DIRECTORY`, the real store as `GIT_ALTERNATE_OBJECT_DIRECTORIES`), and
`adopt()` brings what they wrote into the real store from outside the sandbox, each id derived again
from the content: a loose object whose content does not hash to its name, or a pack `git index-pack`
refuses, is set aside in the iteration's quarantine (`loop.git_tampered`), never stored.
"""

from __future__ import annotations

import contextlib
import os
import re
import zlib
from pathlib import Path

from healer import digest
from healer.git import GitError, raw

_HEX2 = re.compile(r"[0-9a-f]{2}")
_HEX38 = re.compile(r"[0-9a-f]{38}")
_KINDS = (b"blob", b"tree", b"commit", b"tag")
CHUNK = 1 << 16


def _verified(path: str, oid: str) -> bool:
    """The loose object at `path` is a well-formed zlib stream of `type size\\0content` whose SHA-1 is `oid`.
    Streamed: a small file that inflates to gigabytes costs time, never memory."""
    h = digest.sha1()
    d = zlib.decompressobj()
    head = b""
    size = total = -1
    with open(path, "rb") as f:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                break
            buf = d.decompress(chunk, CHUNK)
            while True:
                if size < 0:
                    head += buf
                    nul = head.find(b"\0")
                    if nul < 0:
                        if len(head) > 64:
                            return False
                    else:
                        kind, _, n = head[:nul].partition(b" ")
                        if kind not in _KINDS or not n.isdigit():
                            return False
                        size, total = int(n), len(head) - nul - 1
                        h.update(head)
                else:
                    total += len(buf)
                    h.update(buf)
                if total > size >= 0:
                    return False
                if not d.unconsumed_tail:
                    break
                buf = d.decompress(d.unconsumed_tail, CHUNK)
    try:
        rest = d.flush()
    except zlib.error:
        return False
    if rest:
        total += len(rest)
        h.update(rest)
    return d.eof and not d.unused_data and size >= 0 and total == size and h.hexdigest() == oid


def adopt(cwd: Path, private: Path, store: Path, quarantine: Path) -> list[str]:
    """Move what the sandboxed programs wrote to `private` into the repository's `store`, checked. Returns the
    names set aside (content that is not what its name says). What git left half-written (`tmp_obj_*`) stays."""
    if not private.is_dir():
        return []
    refused: list[str] = []
    try:
        tops = list(os.scandir(private))
    except OSError:
        return []
    for top in tops:
        if _HEX2.fullmatch(top.name) and top.is_dir(follow_symlinks=False):
            for f in os.scandir(top.path):
                if not _HEX38.fullmatch(f.name):
                    continue
                oid = top.name + f.name
                try:
                    ok = f.is_file(follow_symlinks=False) and _verified(f.path, oid)
                except (OSError, zlib.error):
                    ok = False
                if not ok:
                    refused.append(f"{top.name}/{f.name}")
                    _set_aside(f.path, quarantine, f"objects-{top.name}{f.name}")
                    continue
                dest = store / top.name / f.name
                if os.path.exists(dest):  # the real store's copy is authoritative
                    os.unlink(f.path)
                    continue
                dest.parent.mkdir(exist_ok=True)
                os.chmod(f.path, 0o444)
                os.replace(f.path, dest)
        elif top.name == "pack" and top.is_dir(follow_symlinks=False):
            refused += _adopt_packs(cwd, Path(top.path), store, quarantine)
    return refused


def _adopt_packs(cwd: Path, folder: Path, store: Path, quarantine: Path) -> list[str]:
    """Each pack is indexed again by `git index-pack --strict` (ids computed from its content, every object
    checked, the pack's own .idx never trusted; read from its file, never whole into memory), then moved into the
    real store under the name git gives it, its new index last (git finds a pack by its index)."""
    refused = []
    # a runner killed between moving a pack and its index left the store a pack git cannot see: its index is
    # made again from the pack itself (never the one left here, which the agent could have written)
    for p in sorted((store / "pack").glob("pack-*.pack")):
        if not p.with_suffix(".idx").exists() and not p.is_symlink():
            with contextlib.suppress(GitError, OSError):
                raw(cwd, "index-pack", "--strict", str(p))
    for p in sorted(folder.glob("*.idx")):
        if not p.with_suffix(".pack").exists():
            p.unlink()  # the index of a pack adopted already (or of none): derived data
    for p in sorted(folder.glob("*.pack")):
        if p.is_symlink() or not p.is_file():
            continue
        for side in folder.glob(p.stem + ".*"):
            if side.suffix != ".pack" and (side.is_symlink() or side.is_file()):
                side.unlink()  # the agent's index of its pack (or git's own): derived data, made again below
        idx = p.with_suffix(".idx")
        try:
            name = raw(cwd, "index-pack", "--strict", "-o", str(idx), str(p)).split()[-1].decode()
            ok = len(name) == 40 and not name.strip("0123456789abcdef")
        except (GitError, OSError, IndexError):
            ok = False
        if not ok:
            refused.append(f"pack/{p.name}")
            _set_aside(str(p), quarantine, f"objects-{p.name}")
            if idx.exists():
                idx.unlink()
            continue
        dest = store / "pack" / f"pack-{name}"
        dest.parent.mkdir(exist_ok=True)
        if dest.with_suffix(".idx").exists():  # the store has this very pack already
            p.unlink()
            idx.unlink()
            continue
        os.replace(p, dest.with_suffix(".pack"))
        os.replace(idx, dest.with_suffix(".idx"))
    return refused


def _set_aside(path: str, quarantine: Path, name: str) -> None:
    """Kept, never over an earlier copy: the same forged name refused after the agent and again after a gate
    is two pieces of evidence."""
    quarantine.mkdir(parents=True, exist_ok=True)
    dest, n = quarantine / name, 1
    while os.path.lexists(dest):
        n += 1
        dest = quarantine / f"{name}.{n}"
    os.replace(path, dest)
