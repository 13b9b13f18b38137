"""A game day against YOUR fleet: `healer gameday run SCENARIO --root FLEET`.

No fleet is built: the scenario's `fleet:` section is ignored and its faults act on the fleet at
`--root`, with its own policy, store and daemons (or, with `real.supervisor: once`, a real
`healer supervise --once` tick every `tick`). Faults fire at `at:` seconds: `command` (any argv,
its `undo` journaled first), `kill_supervisor`, `kill_dispatcher`, `frozen_dispatch`, `thaw_dispatch`
(through the lease holders, as healer's Chaos Toolkit extension does), `failpoint` (each supervisor-side failpoint
its glob names armed in turn in the next `supervise --once` child, which dies there; the next tick recovers).
Each fault is recorded in the
fleet's event log as `chaos.fault`; the expectations run over the events of the run (and `command`
probes in the fleet root). The undo journal is applied at the end (the rollbacks of the report), and
by `healer gameday clean` if this run is killed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from chaos.checkers import History
from chaos.engine.base import CHANGES, SUPERVISOR_SIDE, Activity, Result, apply_fault, finish, signame
from chaos.faults import roles
from chaos.faults.command import inject
from chaos.faults.undo import UndoJournal, home
from chaos.scenario import Scenario, in_force, match
from healer import failpoints
from healer.clock import Clock, system
from healer.errors import InvalidInput, UsageError
from healer.policy_in_force import policy_for
from healer.store import open_store

TICKET_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_]*-\d+$")  # a board id (T-1, S-12): what an expectation about a ticket names


def refuse_unsupported(sc: Scenario) -> None:
    """A scenario not meant for your fleet is refused (64) with one line; one meant for it was validated at load."""
    if not sc.for_root:
        raise UsageError(f"{sc.source or sc.name}: not meant for --root: it judges a fleet of its own making (its "
                         "tickets, its faults); a game day for your fleet says `for_root: true` (shipped: "
                         "`healer gameday list chaos/scenarios/root`)")


def unknown_tickets(sc: Scenario, tickets: set[str]) -> list[str]:
    """Expectations naming a ticket your fleet does not have: judged against it, they would pass or fail for a
    ticket that is not there. Globs (`*`, `T-*`) apply to all that match."""
    out = []
    for section, checks in (("expect", sc.expect),):
        for i, c in enumerate(checks):
            for path, sel in c.selectors():
                subj = getattr(sel, "subject", None)
                if isinstance(subj, str) and TICKET_ID.match(subj) and subj not in tickets:
                    out.append(f"{sc.source or sc.name}: {section}[{i}].{'.'.join((*path[:-1], 'subject'))}: names ticket {subj}, which the "
                               f"fleet has not got (expected one of its tickets or a glob)")
    return out


class FleetEngine:
    def __init__(self, scenario: Scenario, root: Path, *, progress=None, wall: Clock | None = None) -> None:
        self.sc, self.root, self.progress = scenario, Path(root), progress
        self.clock = wall or system()
        self.fp_queue: list[tuple[str, str, int]] = []  # (failpoint, action, hit): armed one per tick, in turn
        self.fp_missed: list[str] = []
        self.fp_fired = 0
        self.store = None
        self.last_armed_at = 0.0  # when the last tick armed with a failpoint ended: its work is the next ticks'
        self.quiet_ticks = 0  # unarmed ticks in a row that changed nothing

    def _fault(self, f, journal) -> str:
        if f.fault == "command":
            pr = f.params
            r = inject(pr["command"], undo=pr.get("undo"), cwd=pr.get("cwd") or str(self.root),
                       timeout=float(pr.get("timeout", 60)), journal=journal)
            return f"exit {r['status']}"
        if f.fault in ("kill_supervisor", "kill_dispatcher"):
            return str(roles.kill(self.root, f.fault.removeprefix("kill_")))
        if f.fault == "frozen_dispatch":
            return str(roles.freeze_dispatch(self.root, journal))  # its SIGCONT journaled in the game day's journal
        if f.fault == "thaw_dispatch":
            return str(roles.thaw_dispatch(self.root))
        if f.fault == "failpoint":
            failpoints.load_all()
            names = [d.name for d in failpoints.registry() if match(f.failpoint, d.name) and d.name.startswith(SUPERVISOR_SIDE)]
            if not names:
                raise ValueError(f"no supervisor-side failpoint matches {f.failpoint!r} (`healer failpoints` lists them)")
            self.fp_queue += [(n, f.action, f.hit) for n in names]
            return f"armed in turn: {', '.join(names)}"
        raise KeyError(f.fault)

    def _tick(self) -> None:
        """One real `healer supervise --once`; with a failpoint queued, armed in it: a child that dies there is a
        crash (`chaos.crash`), one that ends well never reached it (`chaos.failpoint_missed`)."""
        env = {k: v for k, v in os.environ.items() if k != failpoints.ENV}
        armed = self.fp_queue.pop(0) if self.fp_queue else None
        if armed:
            env[failpoints.ENV] = f"{armed[0]}={armed[1]}@{armed[2]}"
        before = self.store.last_event_id() if self.store is not None else 0
        r = subprocess.run([sys.executable, "-m", "healer", "supervise", "--once", "--root", str(self.root)],
                           capture_output=True, text=True, timeout=300, env=env)
        if self.store is not None:
            changed = any(e.kind.startswith(CHANGES) for e in self.store.events(after=before))
            self.quiet_ticks = 0 if armed or changed else self.quiet_ticks + 1
        if armed:
            self.last_armed_at = self.clock.now()
        if armed and self.store is not None:
            name, action, hit = armed
            if r.returncode != 0:
                self.fp_fired += 1
                self.store.append("chaos.crash", "supervisor", {"failpoint": name, "action": action, "exit": r.returncode,
                                                                "signal": signame(r.returncode)})
            else:
                self.fp_missed.append(name)
                self.store.append("chaos.failpoint_missed", name, {"action": action, "hit": hit})

    def abort(self) -> None:
        """Nothing of this run stays armed in this process (each fault's undo is journaled before it acts)."""

    def run(self) -> Result:
        refuse_unsupported(self.sc)
        self.store = store = open_store(self.root, use_env=False)
        missing = unknown_tickets(self.sc, {t.id for t in store.tickets()})
        if missing:  # before any fault touches the fleet
            store.close()
            raise InvalidInput(missing[0], missing)
        pol = policy_for(self.root, None)
        tick = float(self.sc.tick or pol.supervisor.tick)
        journal = UndoJournal(home() / f"fleet-{os.getpid()}-{self.sc.name}", self.clock)
        result = Result(self.sc, "passed", seed=self.sc.seed, workdir=str(self.root))
        result.stats["rules"] = in_force(pol)  # your fleet's policy (and its runbooks), not the scenario's
        first = store.last_event_id()
        start = self.clock.now()
        cap = min(float(self.sc.duration), float(self.sc.timeout))
        pending = sorted(self.sc.faults, key=lambda f: float(f.at or 0))
        next_tick = start
        last_fault = start
        try:
            while True:
                now = self.clock.now()
                while pending and now - start >= float(pending[0].at or 0):
                    f = pending.pop(0)
                    t0 = self.clock.now()
                    status, out, kind = apply_fault(lambda f: self._fault(f, journal), f)
                    store.append(kind, f.target or f.fault, {"fault": f.fault, "target": f.target, "output": out[:300],
                                                             **({} if status == "succeeded" else {"status": status})})
                    result.activities.append(Activity(f"fault {f.fault}", "action", t0, self.clock.now(), status, out))
                    last_fault = self.clock.now()
                if self.sc.real.supervisor == "once" and now >= next_tick:
                    self._tick()
                    next_tick = self.clock.now() + tick
                if now - start >= cap:
                    break
                if not pending and not self.fp_queue and self._settled(store, first, last_fault, tick):
                    break
                if self.progress:
                    self.progress((now - start) / cap)
                self.clock.sleep(0.1)
        finally:
            for u, what in journal.undo_all():
                t = self.clock.now()
                result.rollbacks.append(Activity(f"undo {u.kind}", "rollback", t, t, "succeeded", what))
            journal.finish()
        end = self.clock.now()
        history = History(store.events(after=first), {t.id: t for t in store.tickets()}, store.intents(), start, end,
                          extra={"root": str(self.root), "failpoints_left": [x[0] for x in self.fp_queue],
                                 "failpoints_missed": self.fp_missed, "failpoints_fired": self.fp_fired})
        store.close()
        result.started, result.ended = start, end
        return finish(result, history, self.clock)

    def _settled(self, store, first: int, last_fault: float, tick: float) -> bool:
        """`real.until` seen after the last fault and the last crashed tick, or (without one) two quiet ticks."""
        until = self.sc.real.until
        if until:
            after = max(last_fault, self.last_armed_at)
            evs = store.events(after=first)
            return any(match(until.get("kind"), e.kind) and match(until.get("subject"), e.subject) and e.at >= after
                       for e in evs)
        if self.sc.real.supervisor == "once":  # our own ticks: two in a row that changed nothing, none armed
            return self.quiet_ticks >= 2
        # two ticks with nothing changed: after the last fault, and after the last change it brought about (a crashed
        # tick's work is finished by the ones after it)
        changed = [e.at for e in store.events(after=first) if e.kind.startswith(CHANGES)]
        return self.clock.now() - max([last_fault, *changed]) >= 2 * tick
