"""Scripted agent behaviours for the simulated engine: pure Python, no I/O, deterministic by seed.

A behaviour answers one question each time an agent starts on a ticket: what will this
run do? (`plan(n, rng) -> Run`, where `n` counts the runs on that ticket so far, 0-based).
The simulated engine turns the answer into a virtual process that ends, dies, hangs or
stops heart-beating at the right virtual time. The real engine uses the small programs
next to this file (`hang.py`, …) for the same roles.
"""

from __future__ import annotations

import errno
import random
from dataclasses import dataclass, field
from typing import Any

from healer import durations


@dataclass(frozen=True)
class Run:
    duration: float  # virtual seconds until the run ends (or dies)
    outcome: str  # success | fail | die | hang | noop | broken
    commit: bool = True  # produced a new commit
    signature: str | None = None  # failure signature when it fails
    heartbeats: bool = True  # a hung agent stops heart-beating
    cause: str | None = None  # outcome `infra`: the runner's own cause in its result file (healer/core/endings.py)


def _d(params: dict[str, Any], key: str, default: str) -> float:
    v = params.get(key, default)
    return float(v) if isinstance(v, (int, float)) else durations.parse(str(v))


@dataclass
class Behaviour:
    params: dict[str, Any] = field(default_factory=dict)

    def plan(self, n: int, rng: random.Random) -> Run:  # pragma: no cover - abstract
        raise NotImplementedError


class Succeeds(Behaviour):
    """Works for `duration` (default 20m), commits, opens a proposal that passes the merge gates."""

    def plan(self, n, rng):
        return Run(_d(self.params, "duration", "20m"), "success")


class FailsSameCommit(Behaviour):
    """The 176-relaunch incident: fails the same way every time and pushes the same commit."""

    def plan(self, n, rng):
        return Run(_d(self.params, "duration", "10m"), "fail", commit=n == 0, signature=self.params.get("signature", "E: tests failed"))


class Fails(Behaviour):
    """Fails every run but with a new commit each time (real work, still red)."""

    def plan(self, n, rng):
        return Run(_d(self.params, "duration", "10m"), "fail", commit=True, signature=f"E{n}")


class Dies(Behaviour):
    """The process vanishes after `after` without an exit being recorded (OOM, host reboot).
    `commit: true` makes each run commit before dying (real progress); `deaths: N` then succeeds."""

    def plan(self, n, rng):
        deaths = int(self.params.get("deaths", 10**6))
        if n >= deaths:
            return Run(_d(self.params, "duration", "20m"), "success")
        return Run(_d(self.params, "after", "15m"), "die", commit=bool(self.params.get("commit", False)))


class Hangs(Behaviour):
    """Runs forever and stops heart-beating after `after` (ignores SIGTERM in real mode)."""

    def plan(self, n, rng):
        return Run(_d(self.params, "after", "1m"), "hang", commit=False, heartbeats=False)


class BrokenProposal(Behaviour):
    """Commits and opens a proposal whose merge gates always fail."""

    def plan(self, n, rng):
        return Run(_d(self.params, "duration", "15m"), "broken")


class MergeStalls(Behaviour):
    """Simulated mode: commits and opens a proposal whose merge is never decided (the merge checkout stays busy,
    so the gates port answers `deferred` every pass, as it does for a busy checkout): opened, never closed."""

    defers = True

    def plan(self, n, rng):
        return Run(_d(self.params, "duration", "15m"), "success")


class Noop(Behaviour):
    """Exits 0 without a commit: nothing to do (a ticket whose work is already merged)."""

    def plan(self, n, rng):
        return Run(_d(self.params, "duration", "2m"), "noop", commit=False)


class CannotStart(Behaviour):
    """Simulated mode: the agent cannot even start, the runtime's launch raises. `error: missing` (the loop
    command is not there, FileNotFoundError: the ticket's failure) or `disk_full` (ENOSPC: the host's failure);
    the first `times` launches fail (default: every one), later runs succeed after `duration`."""

    def refuse(self, n: int) -> OSError | None:
        if n >= int(self.params.get("times", 10**6)):
            return None
        if self.params.get("error", "missing") == "disk_full":
            return OSError(errno.ENOSPC, "No space left on device")
        return FileNotFoundError(errno.ENOENT, "No such file or directory: 'healer-loop'")

    def plan(self, n, rng):
        return Run(_d(self.params, "duration", "10m"), "success")


class InfraDown(Behaviour):
    """Simulated mode: runs `first` .. `first + times - 1` (0-based) meet a service that is away and end as the loop
    runner ends then: exit 69 with its `cause` in the result file (`model_unavailable`: the model endpoint only
    answered 5xx; `store_unavailable`: the store stayed read-only past the tolerance), after `after` (default 2m);
    the others succeed after `duration`. The faults model_down and store_read_only put it on a ticket."""

    def plan(self, n, rng):
        first, times = int(self.params.get("first", 0)), int(self.params.get("times", 10**6))
        if first <= n < first + times:
            return Run(_d(self.params, "after", "2m"), "infra", commit=False,
                       cause=str(self.params.get("cause", "model_unavailable")))
        return Run(_d(self.params, "duration", "10m"), "success")


class Random(Behaviour):
    """Drawn from the seed: mostly successes, some failures, deaths and broken proposals."""

    def plan(self, n, rng):
        r = rng.random()
        dur = rng.uniform(5 * 60, 60 * 60)
        if r < 0.6:
            return Run(dur, "success")
        if r < 0.75:
            return Run(dur, "fail", commit=rng.random() < 0.5, signature=f"E{rng.randint(1, 3)}")
        if r < 0.85:
            return Run(dur, "die", commit=rng.random() < 0.5)
        if r < 0.95:
            return Run(dur, "broken")
        return Run(dur, "noop", commit=False)


BEHAVIOURS: dict[str, type[Behaviour]] = {
    "succeeds": Succeeds,
    "fails_same_commit": FailsSameCommit,
    "fails": Fails,
    "dies": Dies,
    "hangs": Hangs,
    "broken_proposal": BrokenProposal,
    "noop": Noop,
    "merge_stalls": MergeStalls,
    "cannot_start": CannotStart,
    "infra_down": InfraDown,
    "random": Random,
}


def make(name: str, params: dict[str, Any] | None = None) -> Behaviour:
    try:
        return BEHAVIOURS[name](dict(params or {}))
    except KeyError:
        raise ValueError(f"unknown behaviour {name!r}; known: {', '.join(BEHAVIOURS)}") from None
