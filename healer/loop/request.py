"""What a loop run is asked to do (`healer loop run`'s options, or a caller's): the Runner's input
(healer/loop/runner.py), read by both of its halves (healer/loop/iteration.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing
if TYPE_CHECKING:
    from healer.policy.cache import Frozen
    from healer.policy.schema import Policy


@dataclass
class LoopRequest:
    workdir: Path
    policy: Policy | Frozen | None = None  # Frozen: healer.policy.cache's view of one; only read
    policy_file: str | None = None
    task: str | None = None
    task_file: str | None = None
    preset: str | None = None  # overrides loop.agent.preset
    agent_cmd: list[str] | None = None  # implies preset "command"
    run_id: str | None = None
    resume: bool = False
    fleet_root: Path | None = None  # events (and heartbeats) go to this fleet's store
    max_iterations: int | None = None
    allow_dirty: bool = False  # start on a tree with changes to tracked files; they are never committed
    subreaper: bool = False  # adopt orphans of the agent tree (the CLI runner sets this)
    handle_signals: bool = True
    echo: Callable[[str], None] | None = None
