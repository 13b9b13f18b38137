"""The restart storm in the simulated world: `healer up` killed again and again, in virtual time.

The same storm as chaos/storm.py (a fleet whose every agent succeeds, `up` killed at moments drawn
from the seed, a share of the kills taking the loop runners down too, restarted each time, then left
to finish), over the simulated world of chaos/engine/sim.py, which runs the REAL Dispatcher and
Supervisor. A kill drops both objects and the store connection they shared (what a SIGKILL takes
with the process); a restart builds fresh ones from the persisted store, as `healer up` does: new
holders (virtual pids, dead to the lease table), the dispatcher's first pass (its reap) before the
supervisor's next tick. A share of the kills lands inside a step: the `crash` failpoint at a random
store commit (`store.before_commit`) unwinds the pass there and rolls the open transaction back, as a
SIGKILL between two lines would. A kill that takes the runners ends every virtual agent without an
exit status. The facts the checkers read are the real storm's (`chaos.storm.board_facts`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

# the module, not its names: `import chaos.storm` first runs chaos.engine's __init__ (for chaos.engine.base), which
# imports this module while chaos.storm is still half made
from chaos import storm
from chaos.engine.arming import FailpointArming
from chaos.engine.base import Result
from chaos.engine.sim import PID_BASE, Hooks, SimEngine, T
from chaos.scenario import Scenario, seconds
from chaos.scenario_parts import FleetSpec, TicketSpec
from healer import failpoints, lifecycle

CRASH_POINT = "store.before_commit"  # every write the dispatcher and the supervisor make passes here
MAX_WRITES = 12  # a mid-step kill lands at one of the next N product commits after its moment
DISPATCHER_PID = PID_BASE - 1_000_000  # virtual pids of the dispatcher's incarnations (never a live process)


class StormHooks(Hooks):
    """The product's steps armed while a mid-step kill is pending: the `crash` failpoint at its Nth store commit.
    The world's own bookkeeping (a process started or ended) is not a write of `up`: never where it dies."""

    def __init__(self, eng: SimStormEngine) -> None:
        self.e = eng
        self.arming = FailpointArming()

    def around(self, kind: str, fn: Callable[..., T], *args: Any) -> T:
        if kind in ("launch", "kill"):
            with self.arming.armed(None):
                return fn(*args)
        if self.e.pending is None:
            return fn(*args)
        with self.arming.armed(f"{CRASH_POINT}=crash@{self.e.writes[self.e.pending]}"):
            return fn(*args)


class SimStormEngine(SimEngine):
    def __init__(self, scenario: Scenario, workdir, **kw: Any) -> None:
        st = scenario.storm
        assert st is not None
        n = st.tickets
        spec = TicketSpec(id="S-" if n > 1 else "S-1", count=n, title="storm ticket", behaviour="succeeds",
                          params={"duration": seconds(st.agent_delay)})
        scenario = scenario.model_copy(update={"fleet": FleetSpec(pool_size=st.pool_size, tickets=[spec])})
        super().__init__(scenario, workdir, **kw)
        self.plan = storm.schedule(self.seed, st.kills, st.with_runners, (seconds(st.uptime[0]), seconds(st.uptime[-1])))
        rng = random.Random(f"storm-sim:{self.seed}")
        self.mid = set(rng.sample(range(st.kills), round(st.kills * st.mid_step))) if st.kills else set()
        self.writes = [rng.randint(1, MAX_WRITES) for _ in range(st.kills)]
        self.downtime = seconds(st.downtime)
        self.finish_within = seconds(st.finish_within)
        self.incarnation = 0
        self.kills_done: list[dict[str, Any]] = []
        self.pending: int | None = None  # the kill waiting for its product commit (mid-step)
        self.dispatcher_pid = DISPATCHER_PID  # the dispatcher's incarnations: virtual pids, never a live process
        self.hooks = StormHooks(self)

    def step(self, what: str, args: tuple) -> None:
        if what == "storm_kill":
            self._kill_moment(*args)
            return
        if what == "storm_restart":
            self._restart()
            return
        try:
            super().step(what, args)
        except failpoints.FailpointCrash:
            self._crash(self.pending, mid_step=True)

    # -- the storm ---------------------------------------------------------------------------
    def _kill_moment(self, i: int) -> None:
        if i in self.mid:
            failpoints.reset()  # the hit count starts now: the kill lands at the Nth product commit from here
            self.pending = i
        else:
            self._crash(i, mid_step=False)

    def _crash(self, i: int | None, *, mid_step: bool) -> None:
        assert i is not None
        self.pending = None
        kill = self.plan[i]
        self.dispatcher_up = self.supervisor_up = False
        self.dispatcher = self.supervisor = None  # type: ignore[assignment]
        victims = [p.agent_id for p in self.procs.values() if p.alive] if kill.runners else []
        for aid in victims:
            p = self.procs[aid]
            p.run = replace(p.run, outcome="die")
            self.kill_agent(aid)
        # the process's connection goes with it (its open transaction was rolled back): the next one opens afresh
        self.store.close()
        self.store = self._open_store()
        self.store.append("chaos.fault", "up", {"fault": "kill_up", "n": i, "runners": kill.runners, "mid_step": mid_step,
                                                "runners_killed": len(victims)})
        self.kills_done.append({"n": i, "runners": kill.runners, "mid_step": mid_step, "runners_killed": len(victims),
                                "at": self.sim_now()})
        self.at(self.sim_now() + self.downtime, "storm_restart")

    def _restart(self) -> None:
        self.incarnation += 1
        self.holder_n += 1
        self.dispatcher_pid = DISPATCHER_PID - self.incarnation
        self.dispatcher = self._new_dispatcher()
        self.supervisor = self._new_supervisor()
        self.dispatcher_up = self.supervisor_up = True
        self.store.append("chaos.restart", "up", {"incarnation": self.incarnation})
        done = len(self.kills_done)
        if done < len(self.plan):
            self.at(self.sim_now() + self.plan[done].uptime, "storm_kill", done)
        # `healer up`: the dispatcher's first pass (its reap) runs before the supervisor judges anything
        self.step("dispatch", ())

    def begin(self) -> Result:
        result = super().begin()
        if self.plan:
            self.at(self.plan[0].uptime, "storm_kill", 0)
        return result

    def run(self) -> Result:
        """Until every kill is done and every ticket has ended (or `finish_within` after the last restart)."""
        self.begin()
        step = 600.0
        last_restart = None
        while True:
            self.advance(self.until + step)
            if len(self.kills_done) == len(self.plan) and self.pending is None:
                last_restart = self.until if last_restart is None else last_restart
                if self._settled() or self.until - last_restart >= self.finish_within:
                    break
            if self.until >= max(float(self.sc.duration), 1.0) and len(self.kills_done) < len(self.plan):
                break  # the cap: a storm that cannot finish its kills is reported as it stands
        return self.end()

    def _settled(self) -> bool:
        ended = all(t.state in lifecycle.TERMINAL or t.state in (lifecycle.NEEDS_HUMAN, lifecycle.BLOCKED)
                    for t in self.store.tickets())
        return ended and not any(p.alive for p in self.procs.values())

    # -- what the checkers read ---------------------------------------------------------------
    def facts(self) -> dict[str, Any]:
        tickets = {t.id: t for t in self.store.tickets()}
        f = storm.board_facts(self.store.events(), tickets, self.store.intents())
        f["unmerged_done"] = sorted(tid for tid, t in tickets.items()
                                    if t.state == lifecycle.DONE and t.data.get("merged_commit") is None)
        f["left"] = sorted([f"{p.agent_id} (process alive)" for p in self.procs.values() if p.alive] +
                           [f"{a.id} (registered running)" for a in self.store.agents(states=["running"])])
        f["integrity"] = storm.integrity(self.store.path)
        f["tracebacks"] = 0
        f.update(kills=len(self.kills_done), runner_kills=sum(1 for k in self.kills_done if k["runners"]),
                 mid_step_kills=sum(1 for k in self.kills_done if k["mid_step"]),
                 runners_killed=sum(k["runners_killed"] for k in self.kills_done))
        return f

    def history(self, extra: dict[str, Any] | None = None):
        self._last_facts = self.facts()
        return super().history({**self._last_facts, **(extra or {})})

    def end(self) -> Result:
        result = super().end()
        keys = ("kills", "runner_kills", "mid_step_kills", "runners_killed", "interrupted", "events")
        facts = getattr(self, "_last_facts", None) or {}
        result.stats.update({k: facts[k] for k in keys if k in facts})
        return result
