"""Limits as small composable values (after client-go's workqueue rate limiters).

Each limit answers one question about a step sequence (the actions one finding asks
for, taken all or nothing): `why_not(seq, key, rule, tally) -> reason | None`.
`First(...)` composes them; the first reason wins and the sequence is deferred with
it. `Tally` is this tick's running account (what was already granted in this very
decision), so limits hold across the findings of one tick as well as across ticks.

    Halt            .healer/HALT or remediation.observe_only: everything deferred ("halt")
    Allowed         the whitelist in force (remediation.allowed)
    QuietPeriod     per-subject remediation lease shared by rules, repair agent, humans
    PerSubjectCap   rule limits.max_per_ticket, over the attempts memory keeps
    RuleRate        rule limits.max_per_hour
    RateLimit       per-action sliding window (remediation.rate_limits)
    BlastRadius     remediation.max_actions_per_tick
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from healer import durations
from healer.core.model import Memory, PlannedAction
from healer.core.rules import NON_REMEDIATING
from healer.policy.schema import ACTIONS

HOUR = 3600.0


def _recent(times, now: float, window: float) -> int:
    # the window holds its first instant, as the executor's count of the journal does (created_at >= now - per):
    # a planner that let an hour-old action out of the window planned what the executor then refused
    return sum(1 for t in times if now - t <= window)


# The two rules every actor shares, as plain arithmetic: the planner applies them to its
# memory, the executor (healer/remedy/limiter.py) to the store's journal. One definition.

def rate_reason(action: str, used: int, count: int, per: float, more: int = 1) -> str | None:
    """Why `more` runs of `action` would break "at most `count` per `per` s", having `used` in the window."""
    if used + more > count:
        return f"rate limit: {action} ran {used} times in the last {durations.format(round(per))} (limit {count})"
    return None


def quiet_reason(key: str, last: float | None, now: float, window: float, by: str = "") -> str | None:
    """Why `key` may not get another unblock attempt now, its last one at `last` (`by`: what and who)."""
    if last is None or window <= 0 or now - last >= window:
        return None
    ago, left = durations.format(round(max(0.0, now - last))), durations.format(round(max(0.0, last + window - now)))
    return f"quiet period: {key} had an unblock attempt{f' ({by})' if by else ''} {ago} ago; next allowed in {left}"


@dataclass
class Tally:
    now: float
    memory: Memory
    total: int = 0
    per_action: Counter = field(default_factory=Counter)
    per_rule: Counter = field(default_factory=Counter)
    claimed: dict[str, str] = field(default_factory=dict)  # subject -> finding key that took it this tick
    _seen: dict = field(default_factory=dict)  # counts over memory, which is fixed for the tick: once each

    def recent(self, kind: str, name: str, times, window: float) -> int:
        """_recent over memory's times of `name`, counted once per tick (thousands of findings ask)."""
        k = (kind, name, window)
        n = self._seen.get(k)
        if n is None:
            n = self._seen[k] = _recent(times or (), self.now, window)
        return n

    def grant(self, seq: Sequence[PlannedAction], key: str | None, rule_id: str | None, by: str) -> None:
        self.total += len(seq)
        for a in seq:
            self.per_action[a.action] += 1
        if rule_id:
            self.per_rule[rule_id] += 1
        if key is not None and remediating(seq):
            self.claimed.setdefault(key, by)


def remediating(seq: Sequence[PlannedAction]) -> bool:
    """Does this sequence touch a ticket, worktree or file (and so take the subject's lease)?"""
    return any(a.action not in NON_REMEDIATING for a in seq)


@dataclass(frozen=True)
class Halt:
    on: bool

    def why_not(self, seq, key, rule, tally: Tally) -> str | None:
        return "halt" if self.on else None


@dataclass(frozen=True)
class Allowed:
    allowed: frozenset[str]

    def why_not(self, seq, key, rule, tally: Tally) -> str | None:
        for a in seq:
            if a.action not in ACTIONS or a.action not in self.allowed:
                return f"not allowed: {a.action} is not in remediation.allowed"
        return None


@dataclass(frozen=True)
class QuietPeriod:
    window: float

    def why_not(self, seq, key, rule, tally: Tally) -> str | None:
        if key is None or not remediating(seq):
            return None
        if key in tally.claimed:
            return f"quiet period: {key} already remediated this tick ({tally.claimed[key]})"
        times = tally.memory.attempts.get(key) or ()
        return quiet_reason(key, max(times) if times else None, tally.now, self.window)


@dataclass(frozen=True)
class PerSubjectCap:
    max_attempts: int | None
    window: float  # how long memory keeps attempts

    def why_not(self, seq, key, rule, tally: Tally) -> str | None:
        if self.max_attempts is None or key is None or not remediating(seq):
            return None
        n = _recent(tally.memory.attempts.get(key) or (), tally.now, self.window)
        if n >= self.max_attempts:
            return f"max_per_ticket: {n} attempts on {key} (limit {self.max_attempts})"
        return None


@dataclass(frozen=True)
class RuleRate:
    max_per_hour: int | None

    def why_not(self, seq, key, rule, tally: Tally) -> str | None:
        if self.max_per_hour is None or rule is None:
            return None
        n = tally.recent("rule", rule, tally.memory.rule_times.get(rule), HOUR) + tally.per_rule[rule]
        if n >= self.max_per_hour:
            return f"max_per_hour: rule {rule} acted {n} times in the last hour (limit {self.max_per_hour})"
        return None


@dataclass(frozen=True)
class RateLimit:
    limits: dict  # action -> (count, per)

    def why_not(self, seq, key, rule, tally: Tally) -> str | None:
        need: dict[str, int] = {}
        for a in seq:
            need[a.action] = need.get(a.action, 0) + 1
        for action, k in sorted(need.items()):
            lim = self.limits.get(action)
            if lim is None:
                continue
            count, per = lim
            n = tally.recent("action", action, tally.memory.action_times.get(action), per) + tally.per_action[action]
            why = rate_reason(action, n, count, per, k)
            if why:
                return why
        return None


@dataclass(frozen=True)
class BlastRadius:
    max_per_tick: int

    def why_not(self, seq, key, rule, tally: Tally) -> str | None:
        if tally.total + len(seq) > self.max_per_tick:
            return f"blast radius: max_actions_per_tick {self.max_per_tick} reached"
        return None


@dataclass(frozen=True)
class First:
    limits: tuple

    def why_not(self, seq, key, rule, tally: Tally) -> str | None:
        for lim in self.limits:
            r = lim.why_not(seq, key, rule, tally)
            if r:
                return r
        return None


def retention(policy) -> float:
    """How long memory keeps remediation attempts (quiet periods, max_per_ticket, escalate_after)."""
    return max(policy.remediation.quiet_period, policy.repair_agent.quiet_period, 24 * HOUR)


def for_policy(policy, halted: bool) -> First:
    """The global limits of a tick (rule limits are added per rule by the planner)."""
    rem = policy.remediation
    return First((
        Halt(halted or rem.observe_only),
        Allowed(frozenset(rem.allowed)),
        QuietPeriod(rem.quiet_period),
        RateLimit({a: (r.count, r.per) for a, r in rem.rate_limits.items()}),
        BlastRadius(rem.max_actions_per_tick),
    ))


def for_rule(rule, policy) -> First:
    if rule is None:
        return First(())
    return First((PerSubjectCap(rule.limits.max_per_ticket, retention(policy)), RuleRate(rule.limits.max_per_hour)))
