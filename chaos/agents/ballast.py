"""A game day's full disk: `python -m chaos.agents.ballast fill|free PATH [--max-disk BYTES]`.

`fill` writes PATH until its file system takes not one more byte (or only --leave bytes are free), and refuses (exit 65, one line) when that
file system is larger than --max-disk (default 1 GiB): a game day fills a small volume made for it (a tmpfs
given as `healer gameday run --workdir`), never a real disk. `free` removes PATH (the fault's undo).
Deliberately free of healer imports."""

from __future__ import annotations

import argparse
import os
import sys


def free_bytes(path: str) -> int:
    v = os.statvfs(os.path.dirname(os.path.abspath(path)))
    return v.f_bavail * v.f_frsize


def fill(path: str, max_disk: int, leave: int = 0) -> int:
    v = os.statvfs(os.path.dirname(os.path.abspath(path)))
    size = v.f_blocks * v.f_frsize
    if size > max_disk:
        print(f"ballast: {path}: its file system is {size >> 20} MiB (> --max-disk {max_disk >> 20} MiB); "
              "run the game day with --workdir on a small volume (a tmpfs)", file=sys.stderr)
        return 65
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (1 << 20, 4096, 1):
            while free_bytes(path) - chunk >= leave:
                try:
                    os.write(fd, b"\0" * chunk)
                except OSError:
                    break
    finally:
        os.close(fd)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ballast")
    ap.add_argument("op", choices=["fill", "free"])
    ap.add_argument("path")
    ap.add_argument("--max-disk", type=int, default=1 << 30)
    ap.add_argument("--leave", type=int, default=0, help="bytes to leave free (0: not one)")
    a = ap.parse_args(argv)
    if a.op == "fill":
        return fill(a.path, a.max_disk, a.leave)
    try:
        os.unlink(a.path)
    except FileNotFoundError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
