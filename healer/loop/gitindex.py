"""Git's index file (Documentation/gitformat-index.txt), read where that is exact: pure, no I/O.

`healer loop run` starts by measuring the working tree (healer/loop/gitops.py's snapshot). When the
scratch index was just copied from the real one and `git add -A` found nothing to change in it, the
tree it would write is the one the real index already names in its cache-tree extension, and the
start is clean exactly when that tree is HEAD's: then neither `git write-tree` nor `git status` has
to run. Anything this reader is not sure of (another version than 2 or 3, a bad checksum, a split or
sparse index, an unknown required extension, an unmerged entry, an extended flag such as
intent-to-add or skip-worktree, a submodule, an invalid or missing cache-tree) makes `parse` say so,
and git is asked as before.
"""

from __future__ import annotations

import hashlib
import struct

MAX_BYTES = 1 << 20  # a bigger index is left to git (hashing and walking it here would cost more)
_GITLINK = 0o160000
_DIR = 0o040000  # a sparse index's directory entry


class Index:
    """What the loop needs to know of one index file."""

    __slots__ = ("version", "entries", "plain", "root_tree")

    def __init__(self, version: int, entries: int, plain: bool, root_tree: str | None) -> None:
        self.version = version
        self.entries = entries  # how many entries
        self.plain = plain  # stage 0 only, no extended flag, no submodule, no directory entry
        self.root_tree = root_tree  # the cache-tree's root when it is valid and covers every entry


def parse(data: bytes) -> Index | None:
    """The index in `data`, or None when git has to read it (see the module's docstring)."""
    if len(data) < 32 or len(data) > MAX_BYTES or data[:4] != b"DIRC":
        return None
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3):
        return None
    end = len(data) - 20
    if hashlib.sha1(data[:end]).digest() != data[end:]:
        return None
    pos = 12
    plain = True
    for _ in range(count):
        if pos + 62 > end:
            return None
        mode, = struct.unpack_from(">I", data, pos + 24)
        flags, = struct.unpack_from(">H", data, pos + 60)
        off = 62
        if flags & 0x4000:  # extended flags follow (version 3): intent-to-add, skip-worktree
            if version < 3:
                return None
            plain = False
            off = 64
        namelen = flags & 0xFFF
        if namelen == 0xFFF:  # a long name: up to its NUL
            nul = data.find(b"\0", pos + off, end)
            if nul < 0:
                return None
            namelen = nul - pos - off
        elif pos + off + namelen >= end or data[pos + off + namelen] != 0:
            return None
        if (flags >> 12) & 3 or mode in (_GITLINK, _DIR):
            plain = False
        pos += (off + namelen + 8) & ~7  # the entry, NUL-padded to a multiple of 8
    if pos > end:
        return None
    root = None
    while pos < end:
        if pos + 8 > end:
            return None
        sig = data[pos:pos + 4]
        size, = struct.unpack_from(">I", data, pos + 4)
        body_end = pos + 8 + size
        if body_end > end:
            return None
        if sig in (b"link", b"sdir"):  # split or sparse index: other files or directory entries hold the truth
            return None
        if sig == b"TREE":
            root = _tree_root(data[pos + 8:body_end], count)
        elif not b"A" <= sig[:1] <= b"Z":  # a required extension this reader does not know
            return None
        pos = body_end
    return Index(version, count, plain, root)


def _tree_root(body: bytes, entries: int) -> str | None:
    """The root's tree id from a cache-tree extension, when it is valid and covers all `entries`."""
    nul = body.find(b"\0")
    if nul != 0:  # the root comes first, with an empty path
        return None
    lf = body.find(b"\n", 1)
    if lf < 0:
        return None
    parts = body[1:lf].split(b" ")
    if len(parts) != 2 or not parts[0].lstrip(b"-").isdigit() or not parts[1].isdigit():
        return None
    if int(parts[0]) != entries or len(body) < lf + 21:
        return None
    return body[lf + 1:lf + 21].hex()
