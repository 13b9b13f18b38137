"""Trusted time: which ages healer may act on when a clock stepped or two clocks disagree. Pure.

Theory of operation. Every snapshot carries its readings of "now" (`Timebase`): the clock ages are measured on (the
snapshot's `now`), this host's wall clock, this process's monotonic clock, and the store's own clock (PostgreSQL's
`clock_timestamp()`; SQLite's store is local: the host's wall clock, nothing to compare). Two rules find a clock
that cannot be trusted (`observe`, tolerance `supervisor.clock_tolerance`):

    jump   between two readings of one process, the clock ages are judged on (`now`) moved more (or less) than
           monotonic time: an NTP step, a suspended VM, a faked clock (libfaketime). Forward or back.
    skew   this host's wall clock and the store's clock disagree (several hosts on PostgreSQL). Ages are judged on
           the store's clock there (`now` is the server's), so a skewed host judges others' rows right; its own
           rows look younger (or older) to the others, and its lease judgement is in doubt (`in_doubt`).

Each is reported once (`Observation.news`, which the shell turns into one `clock.jump` / `clock.skew` event and one
log line), never per tick.

An age "crosses" a jump when the moment it is measured from was recorded before the jump was seen: it may be the
jump's size too long (a live agent looks stuck for 2 h) or negative (a dead one looks fresh). On such an age no
destructive action is taken (stop, remove, requeue, escalate, a page on a silence sentinel) until it is confirmed
on trusted time: the condition has gone on firing for its own threshold, measured on the monotonic clock from the
moment the jump was seen (`untrusted`). Ages measured from after the jump are plain, and so is every verdict resting
on evidence rather than on an age (a pid gone, a merged commit, a red gate).

A lease (`lease_expired`) is judged the same way: expired on the store's clock is believed only when this process has
no reason to doubt it, and a lease whose record this process has watched unchanged for its ttl on the monotonic
clock is expired whatever the wall clocks say (neither stolen from a live holder nor held forever by a dead one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

JUMP, SKEW = "jump", "skew"
KEEP = 7 * 86400.0  # monotonic seconds a jump is remembered: longer than any threshold a policy sets sensibly


@dataclass(frozen=True)
class Timebase:
    """One reading of each clock, taken together."""

    now: float  # the clock ages are judged on, the snapshot's `now`: the store's (PostgreSQL), else this host's wall
    wall: float  # this host's wall clock
    mono: float  # this process's monotonic clock (never steps)
    store: float | None = None  # the store's own clock (PostgreSQL's clock_timestamp(); None: the store is local)


@dataclass(frozen=True)
class Jump:
    kind: str  # jump | skew
    size: float  # seconds; jump: `now` moved beyond monotonic (+ forward); skew: host wall minus the store's clock
    seen: float  # the `now` reading when it was seen
    mono: float  # the monotonic reading when it was seen
    cutoff: float  # on `now`'s clock: an age measured from before it crossed the jump

    def describe(self) -> str:
        if self.kind == SKEW:
            return f"this host's wall clock is {self.size:+.0f}s off the store's"
        return f"the wall clock jumped {self.size:+.0f}s"


@dataclass(frozen=True)
class TimeState:
    """What a process remembers between readings (the shell keeps it in memory: monotonic time is per process)."""

    last: Timebase | None = None
    jumps: tuple[Jump, ...] = ()  # jumps seen, newest last, while any may still hold an age
    skew: Jump | None = None  # the skew in force (None: the clocks agree)


@dataclass(frozen=True)
class Observation:
    state: TimeState
    news: tuple[Jump, ...] = ()  # jumps and skews first seen at this reading: report each once


def observe(state: TimeState, now: Timebase, tolerance: float | None) -> Observation:
    """Fold one reading into the state; `tolerance` None or <= 0: clocks are not checked (always trusted)."""
    if tolerance is None or tolerance <= 0:
        return Observation(TimeState(last=now))
    news: list[Jump] = []
    jumps = tuple(j for j in state.jumps if now.mono - j.mono < KEEP)
    last = state.last
    if last is not None and now.mono >= last.mono:
        size = (now.now - last.now) - (now.mono - last.mono)  # the clock ages are judged on
        if abs(size) > tolerance:
            # before the jump the clock read up to last.now + the monotonic time since: a step back makes later
            # stamps overlap earlier ones, so anything up to that later bound may be from before the jump
            before = last.now + (now.mono - last.mono)
            j = Jump(JUMP, size, now.now, now.mono, max(now.now, before))
            jumps += (j,)
            news.append(j)
    skew = state.skew
    off = 0.0 if now.store is None else now.wall - now.store
    if abs(off) > tolerance:
        if skew is None or abs(off - skew.size) > tolerance:
            skew = Jump(SKEW, off, now.now, now.mono, now.now)
            news.append(skew)
    else:
        skew = None
    return Observation(TimeState(last=now, jumps=jumps, skew=skew), tuple(news))


def untrusted(since: float, threshold: float, tb: Timebase | None, state: TimeState | None) -> Jump | None:
    """The jump (or skew) that makes an age measured from `since` untrusted for acting at `threshold`, or None.

    Confirmed on trusted time: once the monotonic time since the jump was seen reaches the threshold, the condition
    has lasted that long whatever the wall clock says, and the age is trusted again."""
    if tb is None or state is None:
        return None
    for j in state.jumps:
        if since >= j.cutoff:
            continue  # measured from after the jump: on the clock as it is now
        if tb.mono - j.mono < threshold:
            return j
    return None


def not_after(stamp: float, now: float | None, steps_back: Sequence[tuple[float, float]] = ()) -> float:
    """A stamp later than `now` was written before the clock stepped back: a wait measured from it (a backoff)
    starts when the step was seen (the latest step whose cutoff covers it), never the step's size later. Without
    such a step (another host's clock ahead) it stands as written."""
    if now is None or stamp <= now:
        return stamp
    seen = [s for cutoff, s in steps_back if stamp <= cutoff]
    return max(seen) if seen else stamp


def steps_back(state: TimeState | None) -> tuple[tuple[float, float], ...]:
    """(cutoff, seen) of each step back in `state` (DispatchInput.steps_back)."""
    return tuple((j.cutoff, j.seen) for j in state.jumps if j.size < 0) if state is not None else ()


# -- which finding's age is it? ------------------------------------------------------------
# finding kind -> the policy threshold its age is compared with (seconds); kinds not listed rest on evidence (a pid
# gone, a merged commit, main's gates, a graph, a file on disk, the loops' own spend): no clock can forge them.
def threshold(kind: str, evidence: Mapping[str, Any], policy) -> float | None:
    h, s = policy.health, policy.sentinels
    if kind == "agent_stuck":
        return float(h.agent_idle if evidence.get("paused") else h.agent_stuck)
    if kind == "stale_label":
        ages = [h.stale_labels[lb] for lb in (evidence.get("labels") or {}) if lb in h.stale_labels]
        return float(min(ages)) if ages else 0.0
    if kind == "dispatch_frozen" and evidence.get("dispatcher") == "silent":
        return float(s.dispatcher_silent)
    table = {
        "agent_idle": h.agent_idle, "frozen_in_progress": h.frozen_in_progress, "stale_block": h.stale_block,
        "orphan_worktree": h.orphan_worktree, "dispatch_frozen": s.dispatch_frozen, "pool_saturated": s.pool_saturated,
        "no_closes": s.no_closes, "supervisor_silent": s.supervisor_silent,
    }
    v = table.get(kind)
    return None if v is None else float(v)


def finding_hold(kind: str, since: float, evidence: Mapping[str, Any], policy, tb: Timebase | None,
                 state: TimeState | None) -> str | None:
    """Why a finding's age may not be acted on yet (a clock jumped or is skewed), or None."""
    t = threshold(kind, evidence, policy)
    if t is None:
        return None
    j = untrusted(since, t, tb, state)
    if j is None or tb is None:
        return None
    left = t - (tb.mono - j.mono)
    return (f"clock: {j.describe()}; this age crossed it and is confirmed on the monotonic clock in "
            f"{max(left, 0.0):.0f}s")


# -- leases ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Watched:
    """One lease record as a process last saw it."""

    record: tuple  # (holder, token, expires_at): a renewal changes it
    since: float  # monotonic: when this record was first seen
    renewed: bool  # this process saw the record change (a renewal by a live holder), not only its first look
    born_expired: bool  # already expired on `now`'s clock when first seen


def watch(prev: Watched | None, record: tuple, mono: float, expired: bool) -> Watched:
    if prev is not None and prev.record == record:
        return prev
    return Watched(record, mono, renewed=prev is not None, born_expired=expired)


def lease_expired(w: Watched, expires_at: float, ttl: float, now: float, mono: float, clock_doubt: bool = False) -> bool:
    """May a lease record (as watched by `w`) be taken over as expired?

    Yes when this process watched it unchanged for its ttl on the monotonic clock: its holder stopped renewing,
    whatever the wall clocks say (a holder that died with its clock ahead holds it no longer than that). A record
    it saw fresh is judged on that watch alone: its expiry is written on the holder's clock, and a live holder whose
    clock is behind ours (by more than the time between its renewals) would otherwise be robbed between two
    renewals. The wall is believed only on a first look at a record already expired (a process that just started:
    nothing watched, nothing to doubt), unless this process's own clock is in doubt (a jump or skew in force)."""
    if mono - w.since >= ttl:
        return True
    if expires_at > now:
        return False
    return not clock_doubt and w.born_expired and not w.renewed


def wait(w: Watched, expires_at: float, ttl: float, now: float, mono: float) -> float:
    """Seconds until `lease_expired` could say yes for this record (a standby's next look)."""
    return max(0.0, ttl - (mono - w.since))


def in_doubt(state: TimeState | None, mono: float, ttl: float) -> bool:
    """This process's own clock is in doubt for a lease of `ttl`: a jump seen less than ttl ago, or a skew in force."""
    if state is None:
        return False
    return state.skew is not None or any(mono - j.mono < ttl for j in state.jumps)
