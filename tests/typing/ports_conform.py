"""Checked by mypy (`make lint`), never run: each adapter structurally satisfies its port.

A method a caller needs that an adapter lacks (or spells differently) fails the lint here,
before any test runs. Add a line when a new adapter appears (e.g. the PostgreSQL store).
"""

from __future__ import annotations

from chaos.engine.sim_ports import SimGates, SimLauncher, SimProcesses, SimRuntime
from chaos.engine.simgit import SimGit
from chaos.engine.simstore import CachedStore
from healer.adopt import ProcTable, RealProcTable
from healer.clock import Clock, SystemClock, VirtualClock
from healer.fleet.ports import Gates, Git, Launcher, Processes, RealGates, RealGit, RealProcesses
from healer.fleet.process_runtime import ProcessRuntime
from healer.fleet.runtime import Runtime
from healer.store.base import ChangeTracking, Store
from healer.store.postgres import PgStore
from healer.store.sqlite import SqliteStore
from healer.supervisor import RepairLauncher
from tests.adopt.test_sim_adopt import SimTable


def stores(a: SqliteStore, b: PgStore, c: CachedStore) -> list[Store]:
    return [a, b, c]


def tracked(a: SqliteStore, c: CachedStore) -> list[ChangeTracking]:
    return [a, c]


def clocks(a: SystemClock, b: VirtualClock) -> list[Clock]:
    return [a, b]


def runtimes(a: ProcessRuntime, b: SimRuntime) -> list[Runtime]:
    return [a, b]


def gits(a: RealGit, b: SimGit) -> list[Git]:
    return [a, b]


def gates(a: RealGates, b: SimGates) -> list[Gates]:
    return [a, b]


def processes(a: RealProcesses, b: SimProcesses) -> list[Processes]:
    return [a, b]


def launchers(a: RepairLauncher, b: SimLauncher) -> list[Launcher]:
    return [a, b]


def proctables(a: RealProcTable, b: SimTable) -> list[ProcTable]:
    """Adopted loops' process table (healer/adopt.py): this host's /proc, and the simulated one of tests/adopt/."""
    return [a, b]
