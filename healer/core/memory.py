"""Memory <-> JSON. The shell persists `dump(decision.memory)` after each tick and
feeds `load(...)` to the next one; the shell may also add attempts (human board
actions, repair-agent actions) under the subject they touched (a ticket id, a
worktree path, a file path) before calling `decide`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from healer.core.model import Memory
from healer.errors import InvalidInput

_MAPS_OF_LISTS = ("attempts", "action_times", "rule_times")
_MAPS_OF_FLOATS = ("first_seen", "cooldowns")


def dump(memory: Memory) -> dict[str, Any]:
    return {
        "first_seen": {k: float(v) for k, v in sorted(memory.first_seen.items())},
        "signals": {k: int(v) for k, v in sorted(memory.signals.items())},
        "attempts": {k: [float(t) for t in v] for k, v in sorted(memory.attempts.items())},
        "action_times": {k: [float(t) for t in v] for k, v in sorted(memory.action_times.items())},
        "rule_times": {k: [float(t) for t in v] for k, v in sorted(memory.rule_times.items())},
        "cooldowns": {k: float(v) for k, v in sorted(memory.cooldowns.items())},
        "repair_runs": [float(t) for t in memory.repair_runs],
    }


def _num(where: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InvalidInput(f"supervisor memory: {where}: expected a number, got {v!r}")
    return float(v)


def _map(data: dict, key: str) -> dict:
    v = data.get(key, {})
    if not isinstance(v, dict):
        raise InvalidInput(f"supervisor memory: {key}: expected a mapping, got {type(v).__name__}")
    return v


def load(data: dict | None) -> Memory:
    """Memory from `dump`'s output; missing keys are empty, wrong types are one clear error (65)."""
    if data is None:
        return Memory()
    if not isinstance(data, dict):
        raise InvalidInput(f"supervisor memory: expected a mapping, got {type(data).__name__}")
    out: dict[str, Any] = {}
    for key in _MAPS_OF_FLOATS:
        out[key] = {str(k): _num(f"{key}.{k}", v) for k, v in _map(data, key).items()}
    out["signals"] = {str(k): int(_num(f"signals.{k}", v)) for k, v in _map(data, "signals").items()}
    for key in _MAPS_OF_LISTS:
        m = {}
        for k, v in _map(data, key).items():
            if not isinstance(v, list):
                raise InvalidInput(f"supervisor memory: {key}.{k}: expected a list of times, got {v!r}")
            m[str(k)] = [_num(f"{key}.{k}", t) for t in v]
        out[key] = m
    runs = data.get("repair_runs", [])
    if not isinstance(runs, list):
        raise InvalidInput(f"supervisor memory: repair_runs: expected a list of times, got {runs!r}")
    out["repair_runs"] = [_num("repair_runs", t) for t in runs]
    return Memory(**out)


def forget_attempts(memory: Memory, subjects: set[str], at: float) -> Memory:
    """Drop the attempts recorded at `at` on `subjects`.

    The core records an attempt when it grants an action; when the executor then
    refuses it on fresh state (a precondition no longer holds, a limit) nothing was
    tried, and holding the ticket for a whole quiet period would only delay the next
    real attempt.
    """
    if not subjects:
        return memory

    attempts = {k: ([t for t in v if t != at] if k in subjects else list(v)) for k, v in memory.attempts.items()}
    return replace(memory, attempts={k: v for k, v in attempts.items() if v})
