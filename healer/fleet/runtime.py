"""The runtime port: how the fleet starts, observes and stops an agent loop.

`ProcessRuntime` (healer/fleet/process_runtime.py) runs local child processes;
`ContainerRuntime` (healer/fleet/container_runtime.py) runs Docker containers.
The dispatcher and the supervisor only talk to this interface, so a dead, exited
or paused container looks exactly like a dead or stopped process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class LaunchSpec:
    argv: Sequence[str]  # never a shell
    cwd: str  # the worktree
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)  # fleet, ticket, run
    log_path: str | None = None  # stdout+stderr go here


@dataclass(frozen=True)
class Handle:
    kind: str  # process | container
    pid: int | None = None
    container: str | None = None  # container id or name
    marker: str | None = None  # process-tree marker (HEALER_TREE)


# observed states
RUNNING = "running"
PAUSED = "paused"  # SIGSTOPped / container paused
EXITED = "exited"  # ended, exit code known
GONE = "gone"  # ended, exit code unknown (killed, container removed)
UNKNOWN = "unknown"  # could not tell (fail-open)


@dataclass(frozen=True)
class Status:
    state: str
    exit_code: int | None = None


class Runtime(Protocol):
    kind: str

    def launch(self, spec: LaunchSpec) -> Handle: ...

    def status(self, handle: Handle) -> Status: ...

    def stop(self, handle: Handle, grace: float) -> None:
        """Stop the agent and everything it started; returns when nothing is left."""

    def wait(self, handle: Handle, timeout: float) -> Status: ...
