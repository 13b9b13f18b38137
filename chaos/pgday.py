"""A game day for the database: real `healer up` hosts on a PostgreSQL server of the game day's own, while the
scenario's faults (`pg_restart`: `pg_ctl restart -m fast`) hit the server (a scenario with `hosts:`).

The fleet is chaos/multihost.py's: a shared bare repository, one clone per host, each host a real `healer up`
(HEALER_STORE_URL, HEALER_HOST_ID, `fleet.shared_remote: origin`) running the scripted agent; the runner is the
hosts' service manager and counts every `up` that exits (`up_exits`: an outage ridden out costs none). Faults come
from the scenario, at `at:` seconds or on the Nth event of a kind (`on_event`, `nth`), and are injected through the
fault registry (chaos/faults/registry.py) with this engine as the world's engine: it holds the `cluster`.

What the checkers read, besides the board's events and tickets (History.extra):

    up_exits      `healer up` exits the service manager saw (and restarted) before the final SIGTERM
    final_exits   each host's exit status at that SIGTERM (0: a clean stop)
    shared_main   chaos.multihost.check's violations: a ticket not done, merged on the shared main more or less
                  than once, or without its work; two live attempts of one ticket; a leader write off the lease
    escalations   needs_human / blocked moves, budget exhaustion, escalate intents (chaos.storm.board_facts)
    merged_twice / never_merged / off_board_merges   the board's proposal.merged events per ticket
    pages         notifications written by any host (the scripted fleet's notifier is a jsonl file per host)
    tracebacks    `Traceback` lines in any host's output
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import psutil
import yaml

from chaos import multihost, pgcluster, storm  # storm, not its names: `import chaos.storm` comes back here half made
from chaos.checkers import History
from chaos.engine.base import Activity, Result, apply_fault, finish
from chaos.faults import NotApplied
from chaos.faults.worlds import REAL, inject
from chaos.scenario import deep_merge, match, seconds
from healer import git, lifecycle
from healer.clock import Clock, system
from healer.errors import HealerError
from healer.store import open_url

HOST_PREFIX = "pgday-h"  # host ids: expectations select the hosts' own events by `payload: {host: "pgday-h*"}`


class PgDayEngine:
    def __init__(self, scenario, workdir: Path, *, seed: int | None = None, disabled: bool = False,
                 overrides: dict | None = None, progress=None, wall: Clock | None = None) -> None:
        self.sc = scenario
        self.seed = scenario.seed if seed is None else seed
        self.wall = wall or system()
        self.disabled = disabled
        self.overrides = deep_merge(deep_merge(scenario.overrides, scenario.disable if disabled else {}), overrides or {})
        self.overrides.pop("switches_off", None)  # set in the environment by chaos.engine.run
        self.overrides.pop("actions_off", None)
        self.workdir = Path(workdir)
        self.progress = progress
        self.cluster = None  # the registry's pg_restart acts on it
        self.fleet = None  # the hosts (pg_kill_mid_merge finds the one stopped at its failpoint)
        self.handled: set[int] = set()  # pids of hosts a pg_kill_mid_merge already let go
        self.board = None

    def abort(self) -> None:
        """Nothing of this run stays armed in this process (its server is stopped by `run` whatever happens)."""

    def run(self):
        res = Result(self.sc, "error", seed=self.seed, disabled=self.disabled, workdir=str(self.workdir))
        res.started = self.wall.now()
        if not pgcluster.available():
            res.error = "no PostgreSQL here (initdb and pg_ctl, and as root a `postgres` user): this game day needs one"
            res.ended = self.wall.now()
            return res
        self.cluster = pgcluster.Cluster().start()
        try:
            return self._run(res)
        finally:
            with contextlib.suppress(Exception):
                if self.board is not None:
                    self.board.close()
            self.cluster.stop()

    def _run(self, res):
        hs, clock = self.sc.hosts, self.wall
        ttl, work, cap = seconds(hs.lease_ttl), seconds(hs.agent_delay), seconds(hs.finish_within)
        wd = self.workdir
        wd.mkdir(parents=True, exist_ok=True)
        bare = wd / "shared.git"
        self.board = board = open_url(self.cluster.url, clock, root=wd)
        git.run(wd, "init", "-q", "--bare", "-b", "main", str(bare))
        seed_clone = wd / "seed"
        git.run(wd, "clone", "-q", str(bare), str(seed_clone))
        (seed_clone / "README.md").write_text("# one shared main\n")
        policy = deep_merge(multihost.policy(ttl, work), self.overrides)
        (seed_clone / "healer.yaml").write_text(yaml.safe_dump(policy, sort_keys=False))
        git.run(seed_clone, "add", "-A")
        git.run(seed_clone, *git.IDENTITY, "commit", "-q", "-m", "initial")
        git.run(seed_clone, "push", "-q", "origin", "HEAD:refs/heads/main")
        for i in range(hs.tickets):
            board.add_ticket(f"work item {i + 1}", id=f"P-{i + 1}", priority=i % 3, body="behaviour: success\n")
        env = {"HEALER_FAILPOINTS": hs.failpoints} if hs.failpoints else None
        self.fleet = fleet = multihost.Hosts(self.cluster.url, wd, bare, self.cluster.port, netns=False, env=env)
        t0 = clock.monotonic()
        pending = list(self.sc.faults)
        finished = False
        try:
            for n in range(1, hs.count + 1):
                fleet.start(f"{HOST_PREFIX}{n}")
            fleet.watch.start()
            while clock.monotonic() - t0 < cap:
                try:
                    for f in list(pending):
                        if not self._due(f, clock.monotonic() - t0, match):
                            continue
                        pending.remove(f)
                        a0 = clock.now()
                        status, out, kind = apply_fault(lambda f: inject(REAL, self, f), f)
                        res.activities.append(Activity(f"fault {f.fault}", "action", a0, clock.now(), status, out))
                        self._mark(kind, {"fault": f.fault, "status": status, "output": out})
                    ts = board.tickets()
                    settled = all(t.state in lifecycle.TERMINAL or t.state in (lifecycle.NEEDS_HUMAN, lifecycle.BLOCKED)
                                  for t in ts)
                    if not pending and settled:  # done, or where no one will move it: the checkers say which
                        finished = all(t.state == lifecycle.DONE for t in ts)
                        break
                except HealerError:  # the server is what the fault restarts: this engine rides it out too
                    pass
                clock.sleep(0.2)
            up_exits = sum(fleet.restarts.values())
        finally:
            fleet.close()
        finals = {name: p.returncode for name, p in fleet.procs.items()}
        logs = "\n".join(p.read_text(errors="replace") for p in sorted((wd / "logs").glob("*.log")))
        events = self._read(board.events)
        tickets = {t.id: t for t in self._read(board.tickets)}
        intents = self._read(board.intents)
        facts = storm.board_facts(events, tickets, intents)
        shared_main = multihost.check(board, bare, hs.tickets, ttl, {"faults": []})
        pages = [ln for r in fleet.procs for f in [wd / r / ".healer" / "notes.jsonl"] if f.exists()
                 for ln in f.read_text().splitlines() if ln.strip()]
        facts.update({"up_exits": up_exits, "final_exits": finals, "shared_main": shared_main, "pages": len(pages),
                      "tracebacks": logs.count("Traceback (most recent call last)"), "finished": finished,
                      "restarts_by_host": dict(fleet.restarts), "seconds": round(clock.monotonic() - t0, 1)})
        for f in pending:  # never due: finish() reports a fault that never ran
            res.stats.setdefault("faults_pending", []).append(f.fault)
        history = History(events, tickets, intents, start=events[0].at if events else res.started, end=self.wall.now(),
                          extra=facts)
        res.stats.update({k: facts[k] for k in ("up_exits", "final_exits", "restarts_by_host", "pages", "seconds")})
        res.steady_after = {"done": facts["done"], "total": facts["total"]}
        return finish(res, history, self.wall)

    def kill_mid_merge(self, within: float = 120.0, ticks: int = 3, hold: float = 30.0) -> str:
        """The store's connection killed mid-merge. Waits (up to `within`) for a host's `healer up` stopped by its
        own failpoint (the scenario's `hosts.failpoints`, e.g. `dispatch.merge_recorded=stop@1`: inside the merge's
        store transaction, the shared main already pushed), ends that host's PostgreSQL backends
        (pg_terminate_backend, by the application_name chaos.multihost gives each host), keeps the host stopped
        until some supervisor has ticked `ticks` times since (so whatever the board now shows is judged: a review
        ticket whose proposal is merged is a zombie without the merge's one transaction), then SIGCONTs it."""
        import psycopg  # lazy: psycopg, 90 ms (-X importtime) on `gameday list` (load_all)

        clock = self.wall
        deadline = clock.monotonic() + within
        stopped = None
        while stopped is None:
            for name, p in self.fleet.procs.items():
                if p.pid in self.handled or p.poll() is not None:
                    continue
                with contextlib.suppress(psutil.Error):
                    if psutil.Process(p.pid).status() == psutil.STATUS_STOPPED:
                        stopped = (name, p)
                        break
            if stopped is None:
                if clock.monotonic() > deadline:
                    raise NotApplied(f"no host's `healer up` stopped at its failpoint within {within:g} s")
                clock.sleep(0.05)
        name, p = stopped
        self.handled.add(p.pid)
        try:
            with psycopg.connect(self.cluster.url, autocommit=True) as c:
                ended = c.execute("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                                  "WHERE application_name = %s", (name,)).fetchone()[0]
            mark = self._read(self.board.last_event_id)
            until = clock.monotonic() + hold
            seen = 0
            while clock.monotonic() < until:
                seen = len([e for e in self._read(lambda: self.board.events(prefix="supervisor.tick")) if e.id > mark])
                if seen >= ticks:
                    break
                clock.sleep(0.1)
        finally:
            os.kill(p.pid, signal.SIGCONT)
        if not ended:
            raise NotApplied(f"{name} stopped at its failpoint, but no backend of it was connected")
        return f"{name} stopped mid-merge: {ended} backend(s) terminated, {seen} supervisor tick(s), then SIGCONT"

    def _due(self, f, elapsed: float, match) -> bool:
        if f.at is not None:
            return elapsed >= float(f.at)
        if f.on_event:
            hits = [e for e in self.board.events(prefix=f.on_event.split("*")[0] or None)
                    if match(f.on_event, e.kind) and match(f.subject, e.subject)]
            return len(hits) >= f.nth
        return True

    def _mark(self, kind: str, payload: dict) -> None:
        """The fault in the board's log (the timeline and `chaos.fault` selectors read it); retried while the
        server it restarted comes back."""
        for _ in range(100):
            try:
                self.board.append(kind, "gameday", {"pid": os.getpid(), **payload})
                return
            except HealerError:
                self.wall.sleep(0.1)

    def _read(self, fn):
        for _ in range(100):
            try:
                return fn()
            except HealerError:
                self.wall.sleep(0.1)
        return fn()
