"""The failpoints armed in this process: the simulated world's port onto healer/failpoints.py.

The product reads its failpoints from the process environment (`HEALER_FAILPOINTS`), as every healer child
does in real mode: one mechanism, so the simulation, which runs the product in its own process, sets that one
variable, here and nowhere else (chaos/engine/sim.py's failpoint faults, chaos/engine/simstorm.py's mid-step
kills). Each change restores what it found, and `restore()` puts back the setting the run started with.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from healer import failpoints


class FailpointArming:
    def __init__(self) -> None:
        self.saved = os.environ.get(failpoints.ENV)  # the setting the run found, put back by restore()

    @staticmethod
    def current() -> str | None:
        return os.environ.get(failpoints.ENV)

    @staticmethod
    def set(spec: str | None, *, reset: bool = False) -> None:
        """Arm `spec` (`name=action@hit`, healer/failpoints.py's syntax), or nothing; `reset` restarts the hit counts."""
        if spec is None:
            os.environ.pop(failpoints.ENV, None)
        else:
            os.environ[failpoints.ENV] = spec
        if reset:
            failpoints.reset()

    @contextmanager
    def armed(self, spec: str | None) -> Iterator[None]:
        """`spec` armed for the block (None: disarmed for it), the setting before it back after."""
        before = self.current()
        self.set(spec)
        try:
            yield
        finally:
            self.set(before)

    def restore(self) -> None:
        self.set(self.saved, reset=True)
