"""When to launch the repair agent (docs/repair.md). Pure: no I/O, no clock reads.

The repair agent is the last resort, so every condition is a ceiling that must
already have been reached by the dumb mechanisms first:

  1. a blockage (a finding or a sentinel) has persisted at least `blocked_for`,
  2. it has been signalled at least `min_signals` times,
  3. nobody (rule, human, repair agent) tried to unblock it within `quiet_period`,
  4. fewer repair runs today (UTC day of `now`) than `max_runs_per_day`,
and no `.healer/HALT`. All must hold for one and the same blockage (1-3);
the cap (4) and HALT are global. `decide` answers with the reason either
way, so a tick can journal why it did or did not launch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from healer.clock import day_of  # a pure function of its argument; reads no clock


@dataclass(frozen=True)
class Blockage:
    key: str  # the finding key ("kind:subject") or sentinel key
    first_seen: float  # when the supervisor first saw it firing
    signals: int  # how many ticks (or notifications) signalled it
    last_unblock_attempt: float | None = None  # latest remediation on it by anyone
    subject: str = ""  # ticket id, path... what `attempts` is keyed by

    @property
    def target(self) -> str:
        return self.subject or self.key.partition(":")[2] or self.key


class Verdict(NamedTuple):
    launch: bool
    reason: str


def last_attempt(b: Blockage, attempts: Mapping[str, Sequence[float]], now: float) -> float | None:
    """The most recent unblock attempt on `b` at or before `now` (future records are ignored)."""
    times = [t for t in attempts.get(b.target, ()) if t <= now]
    if b.last_unblock_attempt is not None and b.last_unblock_attempt <= now:
        times.append(b.last_unblock_attempt)
    return max(times) if times else None


def why_not(b: Blockage, attempts: Mapping[str, Sequence[float]], cfg, now: float) -> str | None:
    """None when `b` alone qualifies for a repair run; otherwise the first condition it fails."""
    age = now - b.first_seen
    if age < cfg.blocked_for:
        return f"{b.key}: blocked {age:.0f}s < {cfg.blocked_for:.0f}s"
    if b.signals < cfg.min_signals:
        return f"{b.key}: signalled {b.signals} < {cfg.min_signals} times"
    last = last_attempt(b, attempts, now)
    if last is not None and now - last < cfg.quiet_period:
        return f"{b.key}: unblock attempted {now - last:.0f}s ago (< quiet period {cfg.quiet_period:.0f}s)"
    return None


def eligible(blockages: Iterable[Blockage], attempts: Mapping[str, Sequence[float]], policy, now: float) -> list[Blockage]:
    """The blockages that meet conditions 1-3, oldest first."""
    cfg = policy.repair_agent
    out = [b for b in blockages if why_not(b, attempts, cfg, now) is None]
    return sorted(out, key=lambda b: (b.first_seen, b.key))


def runs_today(runs: Iterable[float], now: float) -> int:
    today = day_of(now)
    return sum(1 for t in runs if day_of(t) == today and t <= now)


def decide(blockages: Iterable[Blockage], runs: Iterable[float], attempts: Mapping[str, Sequence[float]],
                  policy, now: float, halted: bool = False) -> Verdict:
    """Launch iff enabled, not halted, under today's cap, and one blockage meets every condition."""
    cfg = policy.repair_agent
    if not cfg.enabled:
        return Verdict(False, "repair agent disabled by policy")
    if halted:
        return Verdict(False, "halted (.healer/HALT): observe only")
    n = runs_today(runs, now)
    if n >= cfg.max_runs_per_day:
        return Verdict(False, f"daily cap reached: {n} of {cfg.max_runs_per_day} runs today ({day_of(now)})")
    blockages = list(blockages)
    if not blockages:
        return Verdict(False, "no blockage")
    ok = eligible(blockages, attempts, policy, now)
    if not ok:
        first = sorted(blockages, key=lambda b: (b.first_seen, b.key))[0]
        return Verdict(False, f"no blockage qualifies ({len(blockages)} seen); e.g. {why_not(first, attempts, cfg, now)}")
    keys = ", ".join(b.key for b in ok[:5]) + (f" (+{len(ok) - 5} more)" if len(ok) > 5 else "")
    return Verdict(True, f"{len(ok)} blockage(s) qualify: {keys}")


def blockages_from_memory(memory, keys: Iterable[str] | None = None) -> list[Blockage]:
    """Blockages from the supervisor's Memory (first_seen / signals by finding key; attempts by subject).

    `keys` restricts to what is firing now; a finding that stopped firing is no blockage.
    """
    keys = list(memory.first_seen) if keys is None else list(keys)
    out = []
    for k in keys:
        if k not in memory.first_seen:
            continue
        subject = k.partition(":")[2] or k
        times = memory.attempts.get(subject) or []
        out.append(Blockage(key=k, first_seen=memory.first_seen[k], signals=int(memory.signals.get(k, 0)),
                            last_unblock_attempt=max(times) if times else None, subject=subject))
    return out
