"""Every seed number of the shipped policy (policies/default.yaml, each with its one-line comment) is pinned here:
changing one fails a test.

The game days pin the behaviour behind several of them (relaunch-storm-budget: 5 launches, backoff
5/10/20/40 min; notification-storm: one page per 4 h; silent-dispatch: the frozen sentinel); this table
pins the numbers themselves, in the built-in default and in policies/default.yaml, and the prompt's memory
tails are pinned by what the agent actually receives.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from healer import durations
from healer.policy.load import load_policy
from healer.policy.schema import Policy

REPO = Path(__file__).resolve().parents[2]

# (dotted key, seed value; durations in seconds)
SPEC_10 = [
    ("loop.max_iterations", 12), ("loop.absolute_max", 25),
    ("loop.iteration_timeout", 20 * 60), ("loop.kill_grace", 10),
    ("loop.stall.same_state", 2), ("loop.stall.same_failure", 3),
    ("loop.checkpoint_every", 1),
    ("loop.memory.progress_lines", 60), ("loop.memory.gate_log_lines", 80),
    ("retry.max_launches", 5), ("retry.backoff", [300, 600, 1200, 2400]),
    ("retry.resume_same_state_limit", 3), ("retry.rejected_proposal_replays", 2),
    ("retry.session_ttl", 24 * 3600),
    ("health.agent_idle", 30 * 60), ("health.agent_stuck", 90 * 60),
    ("health.frozen_in_progress", 10 * 60), ("health.orphan_worktree", 30 * 60),
    ("health.stale_labels.to-review", 2 * 3600),
    ("sentinels.dispatch_frozen", 3600), ("sentinels.pool_saturated", 45 * 60), ("sentinels.no_closes", 90 * 60),
    ("sentinels.cooldown", 4 * 3600),
    ("repair_agent.blocked_for", 3 * 3600), ("repair_agent.min_signals", 3),
    ("repair_agent.quiet_period", 4 * 3600), ("repair_agent.max_runs_per_day", 2),
    ("repair_agent.timeout", 15 * 60), ("repair_agent.max_tool_calls", 20),
    ("supervisor.tick", 30), ("supervisor.lease_ttl", 90),
]


def _get(policy: Policy, dotted: str):
    cur = policy.model_dump(by_alias=True)
    for part in dotted.split("."):
        cur = cur[part]
    return _seconds(cur)


def _seconds(v):
    if isinstance(v, list):
        return [_seconds(x) for x in v]
    return durations.parse(v) if isinstance(v, str) else v


@pytest.mark.parametrize("source", ["built-in", "policies/default.yaml"])
@pytest.mark.parametrize(("key", "want"), SPEC_10, ids=[k for k, _ in SPEC_10])
def test_spec_10_default(source, key, want):
    policy = Policy() if source == "built-in" else load_policy(REPO / "policies" / "default.yaml")
    got = _get(policy, key)
    assert got == want, f"{source}: {key} is {got}, the seed is {want}"


def test_the_memory_tails_reach_the_prompt():
    """60 lines of progress.md and 80 of the last gate log: what the agent is given, not only the setting."""
    from healer.loop.agents import build_prompt

    m = Policy().loop.memory
    progress = "\n".join(f"progress {i}" for i in range(1, 201))
    gate_log = "\n".join(f"gate {i}" for i in range(1, 201))
    text = build_prompt(task="task", progress=progress, gate_log=gate_log, lessons="", iteration=1, max_iterations=12,
                        gates=["tests"], protected=[], max_diff_lines=400,
                        progress_lines=m.progress_lines, gate_log_lines=m.gate_log_lines)
    assert "progress 141\n" in text and "progress 140\n" not in text
    assert "gate 121\n" in text and "gate 120\n" not in text
