"""Checked by mypy (`make lint`), never run: each game-day engine structurally satisfies the World its fault
injectors are typed against (chaos/faults/world.py) and the Engine protocol the runner calls (chaos/engine/base.py).

An injector that needs something an engine lacks (or a private member renamed) fails the lint here, before any
game day runs. Add a line when a new engine appears.
"""

from __future__ import annotations

from chaos.engine.base import Engine, EngineFactory
from chaos.engine.fleet import FleetEngine
from chaos.engine.real import RealEngine
from chaos.engine.sim import SimEngine
from chaos.engine.sim_ports import Proc
from chaos.engine.simstorm import SimStormEngine
from chaos.faults.world import RealWorld, Server, ServerWorld, SimAgent, SimWorld, World
from chaos.pgcluster import Cluster
from chaos.pgday import PgDayEngine
from chaos.storm import StormEngine


def sim_worlds(a: SimEngine, b: SimStormEngine) -> list[SimWorld]:
    return [a, b]


def sim_agents(a: Proc) -> list[SimAgent]:
    return [a]


def real_worlds(a: RealEngine) -> list[RealWorld]:
    return [a]


def worlds(a: SimEngine, b: RealEngine) -> list[World]:  # the faults both worlds share (chaos/faults/board.py)
    return [a, b]


def server_worlds(a: PgDayEngine) -> list[ServerWorld]:
    return [a]


def servers(a: Cluster) -> list[Server]:
    return [a]


def engines(a: SimEngine, b: SimStormEngine, c: RealEngine, d: StormEngine, e: PgDayEngine, f: FleetEngine) -> list[Engine]:
    return [a, b, c, d, e, f]


def factories() -> list[EngineFactory]:  # what chaos.engine.engine_for returns, by the scenario's mode
    return [SimEngine, SimStormEngine, RealEngine, StormEngine, PgDayEngine]
