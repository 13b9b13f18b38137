"""Pick the runtime named by `fleet.runtime` (the container runtime is imported only when asked for)."""

from __future__ import annotations

from healer.clock import Clock
from healer.errors import InvalidInput
from healer.fleet.process_runtime import ProcessRuntime
from healer.fleet.runtime import Runtime


def runtime_for(policy, clock: Clock | None = None) -> Runtime:
    kind = policy.fleet.runtime
    if kind == "process":
        return ProcessRuntime(clock)
    if kind == "container":
        from healer.fleet.container_runtime import (
            ContainerRuntime,  # lazy: pulls docker: 58 ms of the dispatcher's start, which a process fleet never needs
        )

        return ContainerRuntime.from_policy(policy, clock)
    raise InvalidInput(f"fleet.runtime: expected process or container, got {kind!r}")
