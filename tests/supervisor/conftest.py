"""Fixtures for the supervisor area. Shell fixtures are prefixed `shell_`; add others beside them."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from healer.clock import VirtualClock
from healer.policy.schema import Policy
from healer.store import open_store
from tests.conftest import make_repo

PY = sys.executable


@dataclass
class ShellFleet:
    root: Path
    store: object
    clock: VirtualClock
    policy: Policy

    def ctx(self, actor: str = "supervisor", batch: str | None = None, runtime=None, policy: Policy | None = None):
        from healer.remedy.actions import Context

        return Context(self.root, self.store, policy or self.policy, self.clock, runtime, actor, batch=batch)


@pytest.fixture
def shell_fleet(tmp_path: Path) -> ShellFleet:
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir(exist_ok=True)
    clock = VirtualClock()
    store = open_store(root, clock)
    fleet = ShellFleet(root, store, clock, Policy())
    yield fleet
    store.close()
