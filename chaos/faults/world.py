"""What a fault may do to a world: the interface each engine gives its injectors (issue 35's World interface).

An injector (chaos/faults/sim_world.py, real_world.py, shared.py, or a `FaultSpec`'s own) receives the engine as
one of these protocols and touches nothing else of it: no private member, no engine class imported here (the
engines import the faults, never the other way round). mypy checks that each engine satisfies its protocol
(tests/typing/chaos_conform.py, `make lint`).

- `World`: what every world has: the board (store, policy), the undo journal, the fleet's folder, the seed, the
  world's wall-clock `now`, `injected` (files a fault wrote, which the healer must keep or quarantine), and the
  fleet repository's Git port (chaos/faults/checkouts.py's faults act through it, the same in both worlds).
- `SimWorld`: the simulated engine (chaos/engine/sim.py): virtual agents, the supervisor's and dispatcher's
  liveness as flags, main's colour, its own event queue (`at`); its git is a repository model
  (chaos/engine/simgit.py).
- `RealWorld`: the real engine (chaos/engine/real.py): child processes (supervisor tick, dispatcher) and the
  fleet's git repository, Docker, the scripted agents' next runs.
- `ServerWorld`: a game day with a PostgreSQL server of its own (chaos/pgday.py).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from chaos.agents.behaviours import Behaviour, Run
from chaos.faults.undo import UndoJournal
from healer.clock import Clock, VirtualClock
from healer.fleet.ports import Git
from healer.policy.schema import Policy
from healer.procs import ProcessTree
from healer.store.base import Store


class World(Protocol):
    @property
    def store(self) -> Store: ...

    @property
    def policy(self) -> Policy: ...

    @property
    def undo(self) -> UndoJournal: ...

    @property
    def root(self) -> Path: ...

    @property
    def seed(self) -> int: ...

    @property
    def now(self) -> float: ...  # the world's wall clock (virtual in the simulation)

    @property
    def injected(self) -> dict[str, str]: ...  # fleet-relative path -> sha256 of a file a fault wrote

    @property
    def git(self) -> Git: ...  # the fleet repository's Git port (the product's protocol): real, or the world's model

    @property
    def run_id(self) -> str: ...  # names what a fault leaves (a lock's content, unknown files' bytes)

    @property
    def trash(self) -> Path: ...  # where a vanished worktree goes (kept, never deleted)


# -- the simulated world -------------------------------------------------------------------------------
class SimAgent(Protocol):
    """A virtual agent process: its scripted run, liveness, and the generation that orphans its queued events."""

    agent_id: str
    ticket: str
    run: Run
    started: float
    alive: bool
    paused: bool
    ended_early: bool  # its end came while it was stopped: it ends on SIGCONT
    gen: int


class SimWorld(World, Protocol):
    supervisor_up: bool
    supervisor_paused: bool
    dispatcher_up: bool
    dispatcher_paused: bool
    next_dispatcher_host: str | None  # kill_dispatcher's params.host: the restart comes back under that host id
    frozen: bool  # the dispatcher is alive and launches nothing (frozen_dispatch)
    main_red_since: float | None
    offset: float  # wall-clock jumps so far
    tick: float  # the supervisor's tick (seconds)

    @property
    def procs(self) -> Mapping[str, SimAgent]: ...

    @property
    def clock(self) -> VirtualClock: ...

    @property
    def runtime(self) -> Any: ...  # the agents' runtime port (the console's steering judges liveness with it)

    @property
    def broken(self) -> set[str]: ...  # tickets whose proposals fail the merge gates

    @property
    def broken_since(self) -> dict[str, float]: ...

    @property
    def behaviours(self) -> dict[str, Behaviour]: ...

    @property
    def runs(self) -> dict[str, int]: ...  # ticket -> runs started so far (a behaviour's `n`)

    @property
    def busy_procs(self) -> list[tuple[Any, ProcessTree]]: ...  # real holder processes (busy_worktree)

    def sim_now(self) -> float: ...  # seconds since the start, the event queue's time

    def at(self, t: float, what: str, *args: Any) -> None: ...  # queue an engine event (restart_supervisor, proc_end...)

    def kill_agent(self, agent_id: str) -> bool: ...

    def set_main(self, colour: str) -> None: ...  # green | red: main's gates, and a new main commit

    @property
    def main_commit(self) -> str: ...

    def add_worktree(self, ticket: str, created: float | None = None) -> str: ...

    @property
    def adopt(self) -> Any: ...  # the adopted loops (chaos/engine/sim_adopt.py SimAdopt)

    @property
    def disk(self) -> Any: ...  # the disk-free port (chaos/engine/sim_ports.py SimDisk): `free_bytes` is the world's

    def wait_busy(self) -> None: ...  # until every holder's cwd is visible to the process table


# -- the real world ---------------------------------------------------------------------------------
class RealChild(Protocol):
    """A healer process the engine started (a supervisor tick, the dispatcher)."""

    @property
    def proc(self) -> subprocess.Popen: ...

    @property
    def tree(self) -> ProcessTree: ...

    faulted: str | None  # the fault that killed it (its exit is then no crash of healer's)


class RealWorld(World, Protocol):
    disp_restart_at: float | None  # seconds since the start: a killed dispatcher's restart
    disp_host: str | None  # kill_dispatcher's params.host: the restarted dispatcher's HEALER_HOST_ID

    @property
    def sup(self) -> RealChild | None: ...

    @property
    def disp(self) -> RealChild | None: ...

    @property
    def wall(self) -> Clock: ...

    @property
    def gd(self) -> Path: ...  # the game day's folder (trash, logs)

    @property
    def run_id(self) -> str: ...

    @property
    def holders(self) -> list[tuple[subprocess.Popen, ProcessTree]]: ...

    def elapsed(self) -> float: ...

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]: ...

    def script(self, ticket: str, behaviour: str) -> None: ...  # the ticket's agents' next runs

    def jump_clock(self, seconds: float) -> float: ...

    @property
    def model(self) -> Any: ...  # real.model's scripted model server (chaos/agents/models/server.py), or None

    def docker(self) -> Any: ...

    def fleet_label(self) -> str: ...


class Server(Protocol):
    """chaos.pgcluster.Cluster as a fault sees it."""

    @property
    def pid(self) -> int | None: ...

    def restart(self, mode: str = "fast") -> None: ...


class ServerWorld(Protocol):
    @property
    def cluster(self) -> Server | None: ...

    def kill_mid_merge(self) -> str:
        """End the backends of the host stopped at its failpoint, hold until the supervisor ticked, continue it."""
        ...
