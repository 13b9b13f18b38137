"""Disk pressure, pure: when the fleet stops launching, when it pages, when its reserve is released or made.

Theory of operation. The dispatcher measures, at the start of every pass and before any store write, the
bytes free on each file system the fleet writes to (the store's, the worktrees', the run folders').
Below `fleet.min_free` on any of them the disk is *low*:

- the reserve (a preallocated file of `reserve_size(min_free)` bytes beside the store, healer's own) is
  released at once, so the store can still checkpoint its WAL and record what happens;
- nothing is launched (dispatch is paused with reason `disk_low`, and held locally even when the store
  cannot take that write), a `dispatch.disk_low` event records the finding and one page goes out
  (`disk_low:fleet`, critical);
- healer reclaims what is its own: leftover scratch worktrees and the run folders and agent logs of
  finished tickets (journal first: the `dispatch.disk_reclaimed` event lists them before they go).

Once every file system has `min_free` again, `dispatch.disk_ok` is recorded and the pause lifted (only a pause of
its own); the reserve is made again only with `min_free + reserve` free, so making it cannot tip the
disk back into low. `min_free: 0` turns all of it off. No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from healer.core.fleet import Effect, pause, resume

DISK_LOW = "disk_low"  # the pause reason, the setting's name part and the alert key's kind
SETTING = "dispatch.disk_low"  # {"since": t, "low": {path: free}, "min_free": n} while low, else None
ALERT = f"{DISK_LOW}:fleet"
RESERVE_MAX = 8 * 1024 * 1024  # a WAL checkpoint copies at most the WAL (about 4 MiB at SQLite's 1000-page autocheckpoint)


@dataclass(frozen=True)
class Reading:
    path: str  # a folder on the file system measured
    free: int  # bytes an unprivileged writer may still use there (statvfs f_bavail * f_frsize)


def reserve_size(min_free: int) -> int:
    """The reserve: a quarter of min_free, at most 8 MiB (room for a WAL checkpoint and a few events)."""
    return max(0, min(RESERVE_MAX, min_free // 4))


def low(readings: Sequence[Reading], min_free: int) -> list[Reading]:
    return [r for r in readings if r.free < min_free] if min_free > 0 else []


def reserve_action(readings: Sequence[Reading], min_free: int, has_reserve: bool) -> str | None:
    """`release` the reserve, `make` it, or None. The reserve stands on the first reading's file system
    (the store's): it is released as soon as any file system is low (the store may be the one to need it)."""
    size = reserve_size(min_free)
    if has_reserve and (size == 0 or low(readings, min_free)):
        return "release"
    if not has_reserve and size and readings and all(r.free >= min_free + size for r in readings):
        return "make"
    return None


def disk_changed(readings: Sequence[Reading], min_free: int, *, was_low: bool, now: float, paused: bool,
                 paused_reason: str | None) -> list[Effect]:
    """What a change between low and not low does (nothing while it stays as it was)."""
    short = low(readings, min_free)
    if short and not was_low:
        where = ", ".join(f"{r.path} ({_mib(r.free)} free)" for r in short)
        out = [Effect("set", SETTING, {"since": now, "min_free": min_free, "low": {r.path: r.free for r in short}}),
               Effect("event", "dispatch.disk_low", "fleet", {"min_free": min_free, "low": {r.path: r.free for r in short}})]
        if not paused:
            out += pause(DISK_LOW)
        out.append(Effect("notify", ALERT, f"disk low: {where} < fleet.min_free {_mib(min_free)}: nothing is launched "
                                           "until space is back", {"min_free": min_free, "low": {r.path: r.free for r in short}},
                          severity="critical"))
        return out
    if not short and was_low:
        out = [Effect("set", SETTING, None),
               Effect("event", "dispatch.disk_ok", "fleet", {"min_free": min_free, "free": {r.path: r.free for r in readings}})]
        if paused and paused_reason == DISK_LOW:
            out += resume()
        return out
    return []


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"

