"""What the loop Runner (healer/loop/runner.py) holds and does that its iterations (healer/loop/iteration.py) use:
declared once here, so that both halves are type-checked against the same list. The Runner's __init__ and run()
set these attributes and define these steps; nothing else does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from healer import cgroups, sandbox, watchdog
from healer.clock import Clock
from healer.loop import agents, guard
from healer.loop.decide import Limits
from healer.loop.request import LoopRequest
from healer.loop.state import RunPaths, RunState

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing
if TYPE_CHECKING:
    from healer.policy.schema import Loop  # pulls pydantic: the runner loads it only when it must


class RunHost:
    req: LoopRequest
    clock: Clock
    echo: Callable[[str], None]
    workdir: Path
    st: RunState
    paths: RunPaths
    loop_policy: Loop
    spec: agents.AgentSpec
    limits: Limits
    sbx_mode: str
    stop_signal: str | None
    subreaper: bool
    dog: watchdog.Watchdog | None
    group: cgroups.Group | None
    _wake: tuple[int, int, int] | None
    _last_tree: str | None
    _before: str | None
    _on_disk: dict[str, tuple] | None
    _profile: sandbox.Profile | None
    _gsnap_end: guard.GitSnap | None
    _tmp: Path | None
    _gp: sandbox.GitPaths | None
    _n: int
    _diff_bytes: int
    _agent_stopped: str
    _usage: dict
    _price_scale: float

    # ... and the Runner's own steps these methods take
    def _event(self, kind: str, payload: dict) -> None:
        raise NotImplementedError

    def _save(self) -> None:
        raise NotImplementedError

    def _should_stop(self) -> bool:
        raise NotImplementedError

    def _waiting(self) -> dict:
        raise NotImplementedError
