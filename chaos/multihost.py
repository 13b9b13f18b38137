"""Multi-host game day, real mode: three hosts (separate fleet roots, each its own clone of one shared
bare repository) on one PostgreSQL board, while faults hit them.

A host (`python -m chaos.multihost host ...`) runs three threads, each with its own store connection:
- leader: takes or renews the `supervisor` lease, fences its writes with the token (store.hold), and
  requeues tickets whose worker's heartbeat is older than the ttl (ending that attempt first);
- worker: claims a ticket (FOR UPDATE SKIP LOCKED), records an attempt, does the work in a worktree
  of its clone (a scripted agent: one file, one commit), lands it on the shared main with a
  compare-and-swap (healer/fleet/shared.py), moves the ticket to done;
- heartbeat: beats for the ticket in hand; a worker whose beats have failed for half the ttl gives
  the ticket up before publishing anything (the leader requeues only after a whole ttl).

The runner (`run`) starts the cluster-side pieces, the hosts, the faults (SIGKILL of the leading host,
one host cut from the database by a blackholing proxy for 30 s, PostgreSQL SIGSTOPped for 10 s) and
then checks the history (Jepsen-style, over the event log and the shared repository):
at most one lease holder whose writes are accepted at any instant; never two live attempts of one
ticket; takeover within the ttl (plus one leader tick); every ticket done, merged on main exactly once.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from healer import git, lifecycle
from healer.clock import system
from healer.errors import HealerError
from healer.fleet import shared

LEASE = "supervisor"
ACTOR = "host"


# -- a host ------------------------------------------------------------------------------------------


class Host:
    def __init__(self, url: str, name: str, clone: Path, ttl: float, work: float) -> None:
        self.url, self.name, self.clone, self.ttl, self.work = url, name, clone, ttl, work
        self.clock = system()
        self.stop = threading.Event()
        self.current: tuple[str, str, int] | None = None  # (ticket, agent id, attempt id)
        self.last_beat = 0.0
        self.holder = f"{name}:{os.getpid()}:{uuid.uuid4().hex[:4]}"

    def _store(self):
        from healer.store import open_url

        while not self.stop.is_set():
            try:
                return open_url(self.url, self.clock, migrate=False)
            except HealerError:
                self.clock.sleep(0.5)
        return None

    def _loop(self, step, period: float) -> None:
        s = None
        while not self.stop.is_set():
            try:
                s = s or self._store()
                if s is None:
                    return
                nxt = step(s)
                if nxt is not None:
                    self.stop.wait(max(0.0, min(period, nxt)))
                    continue
            except HealerError as e:  # unreachable store, a refused stale write: the next round starts afresh
                print(f"{self.name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            except Exception as e:  # noqa: BLE001 - a host keeps going, like a service; the log says why
                print(f"{self.name}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                if s is not None:
                    try:
                        s.close()
                    except Exception:  # noqa: BLE001
                        pass
                    s = None
            self.stop.wait(period)

    # leader
    def lead(self, s) -> float | None:
        lease = s.acquire_lease(LEASE, self.holder, os.getpid(), self.name, self.ttl)
        s.hold(lease)
        if lease is None:  # try again the moment the holder's lease runs out: takeover within the ttl
            cur = s.lease(LEASE)
            return None if cur is None else cur.expires_at - self.clock.now() + 0.02
        s.append("leader.tick", self.name, {"holder": self.holder, "token": lease.token})
        now = self.clock.now()
        # level-triggered: a ticket in progress with no running agent for a whole ttl (a claimer that died or
        # was cut between its claim and its agent's registration) goes back to the queue
        running = s.agents(states=["running"])
        owned = {a.ticket_id for a in running}
        for t in s.tickets(states=[lifecycle.IN_PROGRESS]):
            if t.id not in owned and now - t.updated_at > self.ttl:
                try:
                    s.move_ticket(t.id, lifecycle.QUEUED, actor=f"leader:{self.name}", reason="in progress without an agent",
                                  expect=lifecycle.IN_PROGRESS)
                except lifecycle.InvalidTransition:
                    pass
        for a in running:
            if now - a.heartbeat_at <= self.ttl or not a.ticket_id:
                continue
            att = a.data.get("attempt")
            if att is not None:
                s.finish_attempt(att, exit_code=-9, failure_signature="host lost (heartbeat older than the ttl)")
            s.update_agent(a.id, state="lost", ended_at=now)
            try:
                s.move_ticket(a.ticket_id, lifecycle.QUEUED, actor=f"leader:{self.name}", reason=f"{a.host} lost",
                              expect=lifecycle.IN_PROGRESS)
            except lifecycle.InvalidTransition:
                pass

    # heartbeat
    def beat(self, s) -> None:
        cur = self.current
        if cur is None:
            return
        s.heartbeat(cur[1], progress=True)
        self.last_beat = self.clock.monotonic()

    def fresh(self) -> bool:
        return self.clock.monotonic() - self.last_beat < self.ttl / 2

    # worker
    def work_one(self, s) -> None:
        from healer.records import Agent

        with s.tx():  # claim, attempt and agent in one transaction: no claimed ticket without its agent
            t = s.claim_ticket(actor=f"{ACTOR}:{self.name}")
            if t is None:
                return
            now = self.clock.now()
            att = s.add_attempt(t.id, "launch", run_id=self.holder)
            aid = f"{self.name}-{t.id}-{att.id}"
            s.upsert_agent(Agent(aid, t.id, "running", pid=os.getpid(), host=self.name, run_id=self.holder, started_at=now,
                                 heartbeat_at=now, progress_at=now, data={"attempt": att.id}))
        self.last_beat = self.clock.monotonic()
        self.current = (t.id, aid, att.id)
        try:
            status = self._do(t.id, att.id)
        finally:
            self.current = None
        if status == "gave_up":
            return  # the leader ends the attempt and requeues once our heartbeat is a ttl old
        s.finish_attempt(att.id, exit_code=0)
        s.update_agent(aid, state="exited", exit_code=0, ended_at=self.clock.now())
        try:
            s.move_ticket(t.id, lifecycle.REVIEW, actor=f"{ACTOR}:{self.name}", reason=status, expect=lifecycle.IN_PROGRESS)
            s.move_ticket(t.id, lifecycle.DONE, actor=f"{ACTOR}:{self.name}", reason=status, expect=lifecycle.REVIEW)
        except lifecycle.InvalidTransition:
            pass  # requeued meanwhile: the next claimer finds the work on main and only closes the books

    def _do(self, ticket: str, attempt: int) -> str:
        wt = self.clone.parent / "worktrees" / f"{ticket}-{attempt}"
        branch = f"healer/{ticket}-{self.name}-{attempt}"
        base = shared.fetch(self.clone)
        if shared.merged_on_main(self.clone, ticket):
            return "already_merged"
        git.run(self.clone, "worktree", "add", "-q", "-b", branch, str(wt), base)
        end = self.clock.monotonic() + self.work
        while self.clock.monotonic() < end:  # the scripted agent "thinks"
            if not self.fresh():
                return "gave_up"
            self.clock.sleep(0.05)
        (wt / "work").mkdir(exist_ok=True)
        (wt / "work" / f"{ticket}.txt").write_text(f"{ticket} done by {self.name} (attempt {attempt})\n")
        git.run(wt, "add", "-A")
        git.run(wt, *git.IDENTITY, "commit", "-q", "-m", f"{ticket}: the work")
        landed = shared.land(wt, ticket, branch, still_ours=self.fresh)
        git.remove_worktree(wt, self.clone, check=False)
        return landed.status

    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.stop.set())
        tick = self.ttl / 3
        threads = [threading.Thread(target=self._loop, args=(self.lead, tick), daemon=True),
                   threading.Thread(target=self._loop, args=(self.beat, self.ttl / 6), daemon=True),
                   threading.Thread(target=self._loop, args=(self.work_one, 0.1), daemon=True)]
        for t in threads:
            t.start()
        while not self.stop.wait(0.2):
            pass
        for t in threads:
            t.join(timeout=10)


# -- a database partition: a proxy that can blackhole -------------------------------------------------


class Proxy:
    """127.0.0.1:port → the database. `cut()` stops forwarding (bytes are held, new connections hang),
    like packets dropped on a partition; `heal()` lets them through again."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.open = threading.Event()
        self.open.set()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        self.open.clear()

    def heal(self) -> None:
        self.open.set()

    def _accept(self) -> None:
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        self.open.wait()
        try:
            u = socket.create_connection(self.target, timeout=10)
        except OSError:
            c.close()
            return
        for a, b in ((c, u), (u, c)):
            threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                self.open.wait()
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.closed = True
        self.open.set()
        self.sock.close()


# -- the runner --------------------------------------------------------------------------------------


@dataclass
class Report:
    ok: bool = False
    violations: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)


def _with_port(url: str, port: int) -> str:
    from urllib.parse import urlsplit, urlunsplit

    u = urlsplit(url)
    auth = u.netloc.rsplit("@", 1)[0] + "@" if "@" in u.netloc else ""
    return urlunsplit((u.scheme, f"{auth}127.0.0.1:{port}", u.path, u.query, u.fragment))


def run(url: str, cluster, *, hosts: int = 3, tickets: int = 9, ttl: float = 3.0, work: float = 0.5,
        partition: float = 30.0, pause_db: float = 10.0, kill_leader: bool = True, timeout: float = 300.0,
        workdir: Path | None = None) -> Report:
    """Run the game day on the fleet schema `url` (empty); `cluster` (chaos.pgcluster.Cluster or None)
    is what a `pause_db` fault SIGSTOPs. Returns the report; never raises for a failed expectation."""
    from urllib.parse import urlsplit

    from healer.store import open_url

    clock = system()
    own = workdir is None
    work_dir = Path(tempfile.mkdtemp(prefix="healer-multihost.")) if own else workdir
    work_dir.mkdir(parents=True, exist_ok=True)
    rep = Report()
    procs: dict[str, subprocess.Popen] = {}
    proxies: dict[str, Proxy] = {}
    board = open_url(url, clock)
    try:
        bare = work_dir / "shared.git"
        git.run(work_dir, "init", "-q", "--bare", "-b", "main", str(bare))
        seed = work_dir / "seed"
        git.run(work_dir, "clone", "-q", str(bare), str(seed))
        (seed / "README.md").write_text("# one shared main\n")
        git.run(seed, "add", "-A")
        git.run(seed, *git.IDENTITY, "commit", "-q", "-m", "initial")
        git.run(seed, "push", "-q", "origin", "HEAD:refs/heads/main")
        for i in range(tickets):
            board.add_ticket(f"work item {i}", priority=i % 3)
        port = urlsplit(url).port or 5432
        log_dir = work_dir / "logs"
        log_dir.mkdir()

        def start(name: str) -> None:
            root = work_dir / name
            clone = root / "repo"
            if not clone.exists():
                git.run(work_dir, "clone", "-q", str(bare), str(clone))
                proxies[name] = Proxy(port)
            host_url = _with_port(url, proxies[name].port)
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "chaos.multihost", "host", "--url", host_url, "--name", name, "--clone", str(clone),
                 "--ttl", str(ttl), "--work", str(work)],
                stdout=open(log_dir / f"{name}.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True)

        names = [f"h{i + 1}" for i in range(hosts)]
        for n in names:
            start(n)
        t0 = clock.monotonic()

        def mark(kind: str, **payload) -> None:
            for _ in range(200):  # the database may be the thing that is paused
                try:
                    board.append(kind, "gameday", {"t": round(clock.monotonic() - t0, 2), **payload})
                    return
                except HealerError:
                    clock.sleep(0.1)

        def leader_host() -> str | None:
            lease = board.lease(LEASE)
            return lease.host if lease is not None else None

        def wait(cond, secs: float) -> bool:
            end = clock.monotonic() + secs
            while clock.monotonic() < end:
                if cond():
                    return True
                clock.sleep(0.1)
            return False

        def all_done() -> bool:
            return len(board.tickets(states=[lifecycle.DONE])) == tickets

        faults: list[dict] = []
        if kill_leader and wait(leader_host, 30):
            wait(lambda: board.count_events("ticket.moved") >= 2, 30)
            victim = leader_host()
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].wait()
            killed_at = board.now()
            mark("gameday.fault", fault="kill_leader", host=victim)
            wait(lambda: (cur := board.lease(LEASE)) is not None and cur.host != victim, ttl * 4)
            taken = [e for e in board.events(kinds=["lease.taken_over"]) if e.at >= killed_at]
            faults.append({"fault": "kill_leader", "host": victim,
                           "takeover_s": round(taken[0].at - killed_at, 2) if taken else None})
            start(victim)  # the host's service manager restarts it
        def busy_host(exclude: str | None) -> str | None:
            for a in board.agents(states=["running"]):
                if a.host != exclude and procs[a.host].poll() is None:
                    return a.host
            return None

        if partition > 0:
            # cut the leading host while it holds a ticket: the lease and its claim must pass to other hosts,
            # its late writes be refused, its work land once
            wait(lambda: (h := leader_host()) is not None and any(a.host == h for a in board.agents(states=["running"])), 20)
            victim = leader_host() or names[0]
            mark("gameday.fault", fault="partition", host=victim, seconds=partition)
            proxies[victim].cut()
            clock.sleep(partition)
            proxies[victim].heal()
            faults.append({"fault": "partition", "host": victim, "seconds": partition})
            mark("gameday.fault_healed", fault="partition", host=victim)
        if pause_db > 0 and cluster is not None:
            wait(lambda: busy_host(None), 20)
            mark("gameday.fault", fault="pause_db", seconds=pause_db)
            cluster.pause()
            clock.sleep(pause_db)
            cluster.resume()
            faults.append({"fault": "pause_db", "seconds": pause_db})
            mark("gameday.fault_healed", fault="pause_db")
        finished = wait(all_done, max(5.0, timeout - (clock.monotonic() - t0)))
        rep.facts = {"hosts": hosts, "tickets": tickets, "ttl": ttl, "faults": faults, "finished": finished,
                     "seconds": round(clock.monotonic() - t0, 1)}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for px in proxies.values():
            px.close()
    try:
        rep.violations = check(board, bare, tickets, ttl, rep.facts)
    finally:
        board.close()
        if own:
            import shutil

            shutil.rmtree(work_dir, ignore_errors=True)
    rep.ok = not rep.violations
    return rep


# -- checkers (over the whole history) ------------------------------------------------------------------


def check(store, bare: Path, tickets: int, ttl: float, facts: dict) -> list[str]:
    out: list[str] = []
    events = store.events()
    # 1. at most one holder whose writes are accepted at any instant (in commit order)
    token = None
    for e in events:
        if e.kind in ("lease.acquired", "lease.taken_over"):
            token = e.payload["token"]
        elif e.kind == "leader.tick" and e.payload["token"] != token:
            out.append(f"event {e.id}: a write by {e.payload['holder']} (token {e.payload['token']}) accepted while token {token} held")
    facts["stale_writes_refused"] = sum(1 for e in events if e.kind == "lease.stale_write_refused")
    facts["lease_grants"] = sum(1 for e in events if e.kind in ("lease.acquired", "lease.taken_over"))
    # 2. never two live attempts of one ticket
    live: dict[str, int] = {}
    for e in events:
        if e.kind == "attempt.started":
            if e.subject in live:
                out.append(f"{e.subject}: attempt {e.payload['attempt']} started while attempt {live[e.subject]} was live")
            live[e.subject] = e.payload["attempt"]
        elif e.kind == "attempt.ended" and live.get(e.subject) == e.payload["attempt"]:
            del live[e.subject]
    facts["attempts"] = sum(1 for e in events if e.kind == "attempt.started")
    # 3. takeover within the ttl (the lease expires at most ttl after the kill; a leader ticks every ttl/3)
    for f in facts.get("faults", []):
        if f["fault"] == "kill_leader":
            if f["takeover_s"] is None:
                out.append(f"no host took the lease over after {f['host']} was killed")
            elif f["takeover_s"] > ttl + 0.5:  # scheduling slack on a loaded machine
                out.append(f"takeover took {f['takeover_s']} s (ttl {ttl} s)")
    # 4. every ticket done, its work merged on the shared main exactly once
    done = {t.id for t in store.tickets(states=[lifecycle.DONE])}
    every = {t.id for t in store.tickets()}
    for tid in sorted(every - done):
        out.append(f"{tid}: not done ({store.ticket(tid).state})")
    log = git.run(bare, "log", "--format=%B%x00", "main").stdout
    trailers = [ln.split(":", 1)[1].strip() for msg in log.split("\0") for ln in msg.splitlines() if ln.startswith(shared.TRAILER + ":")]
    for tid in sorted(every):
        n = trailers.count(tid)
        if n != 1:
            out.append(f"{tid}: merged on main {n} times")
        elif not (git.run(bare, "cat-file", "-e", f"main:work/{tid}.txt", check=False).code == 0):
            out.append(f"{tid}: merged but work/{tid}.txt is not on main")
    if len(every) != tickets:
        out.append(f"{len(every)} tickets on the board, {tickets} expected")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaos.multihost")
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("host", help="one host of the fleet (started by `run`)")
    h.add_argument("--url", required=True)
    h.add_argument("--name", required=True)
    h.add_argument("--clone", required=True, type=Path)
    h.add_argument("--ttl", type=float, default=3.0)
    h.add_argument("--work", type=float, default=0.5)
    r = sub.add_parser("run", help="the game day: a throwaway PostgreSQL (or --url), three hosts, the faults")
    r.add_argument("--url", help="an empty fleet schema's URL (default: start a throwaway cluster)")
    r.add_argument("--hosts", type=int, default=3)
    r.add_argument("--tickets", type=int, default=9)
    r.add_argument("--partition", type=float, default=30.0)
    r.add_argument("--pause-db", type=float, default=10.0)
    a = ap.parse_args(argv)
    if a.cmd == "host":
        Host(a.url, a.name, a.clone, a.ttl, a.work).run()
        return 0
    from chaos import pgcluster

    cluster = None
    url = a.url
    if url is None:
        cluster = pgcluster.Cluster().start()
        url = cluster.url
    try:
        rep = run(url, cluster, hosts=a.hosts, tickets=a.tickets, partition=a.partition, pause_db=a.pause_db)
    finally:
        if cluster is not None:
            cluster.stop()
    print(json.dumps({"ok": rep.ok, "violations": rep.violations, **rep.facts}, indent=2))
    return 0 if rep.ok else 1


if __name__ == "__main__":
    sys.exit(main())
