"""Multi-host game day, real mode: hosts that are real `healer up` processes (each its own fleet root, its own
clone of one shared bare repository, its own host id) on one PostgreSQL board, while faults hit them.

Each host runs the product as an operator would (`healer up`, HEALER_STORE_URL, HEALER_HOST_ID,
fleet.shared_remote: origin), with the scripted agent (chaos/agents/fleet_agent.py) as every ticket's loop.
The runner is the hosts' service manager: a host's `healer up` that exits is started again a second later.
Faults: SIGKILL of the leading host's `healer up` (kept down until another host leads, then restarted), the
leading host cut from the database for 30 s while an agent of it runs, PostgreSQL SIGSTOPped for 10 s.

Then the history is checked (Jepsen-style, over the event log and the shared repository): at most one supervisor
whose writes are accepted at any instant (every leader write comes from the holder granted last, in commit
order); never two live attempts of one ticket; takeover within the lease ttl; every ticket done, its work merged
on the shared main exactly once.

A host's network path to the database: when this machine allows it (root, iproute2), each host runs in a
network namespace of its own, linked by a veth pair, and the partition sets that link down (packets dropped in
the kernel); elsewhere a blackholing TCP proxy per host stands for it (`--partition-by`, the facts say which).
Only the database path is cut: the hosts share this machine's file system (clones, the shared repository).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psutil
import yaml

from chaos import pgcluster
from healer import git, lifecycle, procs
from healer.clock import system
from healer.core import hosts as host_rules
from healer.errors import HealerError
from healer.fleet import shared_main
from healer.store import open_url

LEASE = "supervisor"
REPO = Path(__file__).resolve().parents[1]
AGENT = REPO / "chaos" / "agents" / "fleet_agent.py"


def policy(ttl: float, work: float) -> dict:
    """Every host's policy (committed in the shared repository): a supervisor lease of `ttl`, hosts lost after 2 ttl."""
    cmd = [sys.executable, str(AGENT), "--task", "{task_file}", "--workdir", "{workdir}", "--run-id", "{run_id}",
           "--think", f"{work:g}"]
    has_readme = "import os, sys; sys.exit(0 if os.path.exists('README.md') else 1)"
    return {"fleet": {"pool_size": 2, "dispatch_tick": "1s", "shared_remote": "origin", "loop_command": cmd,
                      "host_ttl": f"{2 * ttl:g}s",
                      "merge_gates": [{"name": "tree", "run": [sys.executable, "-c", has_readme], "timeout": "60s"}]},
            "supervisor": {"tick": "1s", "lease_ttl": f"{ttl:g}s"},
            "loop": {"kill_grace": "1s"}, "notify": {"notifiers": [{"kind": "jsonl", "path": ".healer/notes.jsonl"}]}}


# -- a database partition: a proxy that can blackhole -------------------------------------------------


class Proxy:
    """127.0.0.1:port → the database. `cut()` stops forwarding (bytes are held, new connections hang),
    like packets dropped on a partition; `heal()` lets them through again."""

    def __init__(self, target_port: int, bind: str = "127.0.0.1") -> None:
        self.target = ("127.0.0.1", target_port)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((bind, 0))
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
        u.settimeout(None)  # an idle connection (a LISTEN waiting for NOTIFY) is not a dead one
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


# -- a database partition: a network namespace per host, its veth link cut ------------------------------


class Netns:
    """A host in a network namespace of its own, linked to this machine's by a veth pair (10.X.N.1 here,
    10.X.N.2 there). Its database path is a forwarder on 10.X.N.1 (the cluster listens on 127.0.0.1 only);
    `cut()` sets the link down: packets are dropped in the kernel, TCP retransmits into the void, as on a real
    partition; `heal()` sets it up again. Root and iproute2 only (`available()`)."""

    PREFIX = "hlmh-"

    def __init__(self, n: int, target_port: int, net: int) -> None:
        tag = f"{os.getpid() % 100000}{n}"
        self.ns = f"{self.PREFIX}{os.getpid()}-{n}"
        self.here, self.there = f"hm{tag}a", f"hm{tag}b"
        self.addr_here, self.addr_there = f"10.{net}.{n}.1", f"10.{net}.{n}.2"
        ip = self._ip
        ip("netns", "add", self.ns)
        try:
            ip("link", "add", self.here, "type", "veth", "peer", "name", self.there)
            ip("link", "set", self.there, "netns", self.ns)
            ip("addr", "add", f"{self.addr_here}/30", "dev", self.here)
            ip("link", "set", self.here, "up")
            ip("-n", self.ns, "addr", "add", f"{self.addr_there}/30", "dev", self.there)
            ip("-n", self.ns, "link", "set", self.there, "up")
            ip("-n", self.ns, "link", "set", "lo", "up")
            self.proxy = Proxy(target_port, bind=self.addr_here)
        except Exception:
            self.close()
            raise
        self.port = self.proxy.port

    @staticmethod
    def _ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)

    @classmethod
    def available(cls) -> str | None:
        """None when namespaces can be made here, else why not."""
        if os.geteuid() != 0:
            return "not root"
        if shutil.which("ip") is None:
            return "no iproute2 (ip)"
        try:  # the whole chain a host needs: a namespace, a veth pair, one end moved into it, a listener on its address
            Netns(0, 9, 200 + os.getpid() % 50).close()
        except (subprocess.SubprocessError, OSError) as e:
            return f"no network namespace here: {(getattr(e, 'stderr', '') or str(e)).strip()}"
        return None

    @classmethod
    def sweep(cls) -> None:
        """Namespaces a killed game day left behind (its pid is gone): deleted with their links."""
        r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
        for line in r.stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            if not name.startswith(cls.PREFIX):
                continue
            pid = name[len(cls.PREFIX):].split("-")[0]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)

    def argv(self, cmd: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns, *cmd]

    def cut(self) -> None:
        self._ip("link", "set", self.here, "down")

    def heal(self) -> None:
        self._ip("link", "set", self.here, "up")

    def close(self) -> None:
        if getattr(self, "proxy", None) is not None:
            self.proxy.close()
        subprocess.run(["ip", "link", "del", self.here], capture_output=True, timeout=30)  # its peer goes with it
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, timeout=30)


# -- the runner --------------------------------------------------------------------------------------


@dataclass
class Report:
    ok: bool = False
    violations: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)


def _with_port(url: str, port: int, host: str = "127.0.0.1") -> str:
    u = urlsplit(url)
    auth = u.netloc.rsplit("@", 1)[0] + "@" if "@" in u.netloc else ""
    return urlunsplit((u.scheme, f"{auth}{host}:{port}", u.path, u.query, u.fragment))


class Hosts:
    """The hosts' `healer up` processes and their service manager (restart a second after an exit)."""

    def __init__(self, url: str, work_dir: Path, bare: Path, port: int, netns: bool, env: dict | None = None) -> None:
        self.url, self.work_dir, self.bare, self.port, self.netns = url, work_dir, bare, port, netns
        self.env = dict(env or {})  # more environment for every host (a game day's HEALER_FAILPOINTS)
        self.procs: dict[str, subprocess.Popen] = {}
        self.proxies: dict[str, Proxy | Netns] = {}
        self.net = 200 + os.getpid() % 50  # 10.<net>.N.0/30 per host: runs side by side do not collide
        self.down: set[str] = set()  # held down on purpose (the killed leader until the takeover)
        self.restarts: dict[str, int] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.logs = work_dir / "logs"
        self.logs.mkdir(exist_ok=True)
        self.clock = system()
        self.watch = threading.Thread(target=self._watch, daemon=True)

    def root(self, name: str) -> Path:
        return self.work_dir / name

    def start(self, name: str) -> None:
        root = self.root(name)
        if not root.exists():
            git.run(self.work_dir, "clone", "-q", str(self.bare), str(root))
            git.run(root, "config", "user.email", "gameday@healer.invalid")
            git.run(root, "config", "user.name", "healer-gameday")
            (root / ".healer").mkdir()
            n = len(self.proxies) + 1
            self.proxies[name] = Netns(n, self.port, self.net) if self.netns else Proxy(self.port)
        path = self.proxies[name]
        url = _with_port(self.url, path.port, path.addr_here if isinstance(path, Netns) else "127.0.0.1")
        # the host's name as its connections' application_name: a game day finds its backends in pg_stat_activity
        url += ("&" if "?" in url else "?") + f"application_name={name}"
        env = {**os.environ, **self.env, "HEALER_STORE_URL": url, "HEALER_HOST_ID": name}
        cmd = [sys.executable, "-m", "healer", "up", "--root", str(root)]
        with open(self.logs / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(path.argv(cmd) if isinstance(path, Netns) else cmd, env=env,
                                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self, name: str) -> None:
        with self.lock:
            self.down.add(name)
            self.procs[name].send_signal(signal.SIGKILL)
            self.procs[name].wait()

    def bring_up(self, name: str) -> None:
        with self.lock:
            self.down.discard(name)
            self.start(name)

    def _watch(self) -> None:
        while not self.stop.wait(1.0):
            with self.lock:
                for name, p in self.procs.items():
                    if name not in self.down and p.poll() is not None and not self.stop.is_set():
                        self.restarts[name] = self.restarts.get(name, 0) + 1
                        self.start(name)

    def close(self) -> None:
        self.stop.set()
        self.watch.join(timeout=5)
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for px in self.proxies.values():
            px.close()
        _kill_agents([self.root(n) for n in self.procs])


def _kill_agents(roots: list[Path]) -> None:
    """Agents outlive a SIGKILLed `healer up` (their own session): a game day leaves none behind."""
    want = {str(r.resolve()) for r in roots}
    for p in procs.processes():
        try:
            if p.environ().get("HEALER_ROOT") in want:
                p.kill()
        except (psutil.Error, OSError):
            pass


def run(url: str, cluster, *, hosts: int = 3, tickets: int = 9, ttl: float = 3.0, work: float = 1.0,
        partition: float = 30.0, pause_db: float = 10.0, kill_leader: bool = True, timeout: float = 300.0,
        workdir: Path | None = None, netns: bool | None = None) -> Report:
    """Run the game day on the fleet schema `url` (empty); `cluster` (chaos.pgcluster.Cluster or None)
    is what a `pause_db` fault SIGSTOPs. `netns`: hosts in network namespaces (None: when this machine allows it,
    else the proxy). Returns the report; never raises for a failed expectation."""
    clock = system()
    own = workdir is None
    work_dir = Path(tempfile.mkdtemp(prefix="healer-multihost.")) if own else workdir
    work_dir.mkdir(parents=True, exist_ok=True)
    rep = Report()
    bare = work_dir / "shared.git"
    board = open_url(url, clock, root=work_dir)
    fleet = None
    try:
        git.run(work_dir, "init", "-q", "--bare", "-b", "main", str(bare))
        seed = work_dir / "seed"
        git.run(work_dir, "clone", "-q", str(bare), str(seed))
        (seed / "README.md").write_text("# one shared main\n")
        (seed / "healer.yaml").write_text(yaml.safe_dump(policy(ttl, work)))
        git.run(seed, "add", "-A")
        git.run(seed, *git.IDENTITY, "commit", "-q", "-m", "initial")
        git.run(seed, "push", "-q", "origin", "HEAD:refs/heads/main")
        for i in range(tickets):
            board.add_ticket(f"work item {i}", id=f"T-{i + 1}", priority=i % 3, body="behaviour: success\n")
        why_not = Netns.available() if netns is not False else "not asked"
        if netns and why_not:
            raise HealerError(f"multihost: network namespaces asked for, but {why_not}")
        if why_not is None:
            Netns.sweep()
        fleet = Hosts(url, work_dir, bare, urlsplit(url).port or 5432, netns=why_not is None)
        names = [f"h{i + 1}" for i in range(hosts)]
        for n in names:
            fleet.start(n)
        fleet.watch.start()
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
            return lease.host if lease is not None and lease.expires_at > board.now() else None

        def wait(cond, secs: float) -> bool:
            end = clock.monotonic() + secs
            while clock.monotonic() < end:
                try:
                    if cond():
                        return True
                except HealerError:
                    pass
                clock.sleep(0.1)
            return False

        def all_done() -> bool:
            return len(board.tickets(states=[lifecycle.DONE])) == tickets

        def running_on(h: str | None) -> bool:
            return h is not None and any(a.host == h for a in board.agents(states=["running"]))

        faults: list[dict] = []
        if kill_leader and wait(leader_host, 60):
            wait(lambda: board.count_events("ticket.moved") >= 2, 60)
            victim = leader_host()
            fleet.kill(victim)
            killed_at = board.now()
            mark("gameday.fault", fault="kill_leader", host=victim)
            wait(lambda: (h := leader_host()) is not None and h != victim, ttl * 4)
            taken = [e for e in board.events(kinds=["lease.taken_over"], subject=LEASE) if e.at >= killed_at]
            faults.append({"fault": "kill_leader", "host": victim,
                           "takeover_s": round(taken[0].at - killed_at, 2) if taken else None})
            fleet.bring_up(victim)  # its service manager restarts it
        if partition > 0:
            # cut the leading host while an agent of it runs: the lead and its tickets must pass to other hosts,
            # its late writes be refused, its work land once
            wait(lambda: running_on(leader_host()), 60)
            victim = leader_host() or names[0]
            mark("gameday.fault", fault="partition", host=victim, seconds=partition)
            fleet.proxies[victim].cut()
            clock.sleep(partition)
            fleet.proxies[victim].heal()
            faults.append({"fault": "partition", "host": victim, "seconds": partition})
            mark("gameday.fault_healed", fault="partition", host=victim)
        if pause_db > 0 and cluster is not None:
            wait(lambda: board.agents(states=["running"]), 30)
            mark("gameday.fault", fault="pause_db", seconds=pause_db)
            cluster.pause()
            clock.sleep(pause_db)
            cluster.resume()
            faults.append({"fault": "pause_db", "seconds": pause_db})
            mark("gameday.fault_healed", fault="pause_db")
        finished = wait(all_done, max(5.0, timeout - (clock.monotonic() - t0)))
        rep.facts = {"hosts": hosts, "tickets": tickets, "ttl": ttl, "faults": faults, "finished": finished,
                     "partition_by": "netns (veth link down)" if fleet.netns else f"proxy ({why_not})",
                     "restarts": dict(fleet.restarts), "seconds": round(clock.monotonic() - t0, 1)}
    finally:
        if fleet is not None:
            fleet.close()
    try:
        rep.violations = check(board, bare, tickets, ttl, rep.facts)
    finally:
        board.close()
        if own:
            shutil.rmtree(work_dir, ignore_errors=True)
    rep.ok = not rep.violations
    return rep


# -- checkers (over the whole history) ------------------------------------------------------------------


def check(store, bare: Path, tickets: int, ttl: float, facts: dict) -> list[str]:
    out: list[str] = []
    events = store.events()
    # 1. at most one supervisor whose writes are accepted at any instant: in commit order, every leader write
    # (a tick, a host taken back) comes from the holder the lease was granted to last
    holder = None
    for e in events:
        if e.subject == LEASE and e.kind == "lease.acquired":
            holder = e.payload["holder"]
        elif e.subject == LEASE and e.kind == "lease.taken_over":
            holder = e.payload["to"]
        elif e.subject == LEASE and e.kind == "lease.released" and e.payload.get("holder") == holder:
            holder = None
        elif e.kind == "supervisor.tick" and e.payload.get("holder") != holder:
            out.append(f"event {e.id}: a tick by {e.payload.get('holder')} accepted while {holder} held the lease")
        elif e.kind == "host.reclaimed" and e.payload.get("by") != holder:
            out.append(f"event {e.id}: {e.payload.get('by')} took {e.subject} back while {holder} held the lease")
    facts["stale_writes_refused"] = sum(1 for e in events if e.kind == "lease.stale_write_refused")
    facts["leader_grants"] = sum(1 for e in events if e.subject == LEASE and e.kind in ("lease.acquired", "lease.taken_over"))
    facts["hosts_fenced"] = sum(1 for e in events if e.kind == "lease.taken_over"
                                and str(e.payload.get("to", "")).startswith(host_rules.FENCED))
    facts["tickets_reclaimed"] = sum(1 for e in events if e.kind == "host.reclaimed")
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
    facts["attempt_hosts"] = sorted({e.payload.get("host") for e in events if e.kind == "attempt.started" and e.payload.get("host")})
    # 3. takeover within the ttl (a standby wakes when the lease expires)
    for f in facts.get("faults", []):
        if f["fault"] == "kill_leader":
            if f["takeover_s"] is None:
                out.append(f"no host took the lead over after {f['host']} was killed")
            elif f["takeover_s"] > ttl + 0.5:  # scheduling slack on a loaded machine
                out.append(f"takeover took {f['takeover_s']} s (ttl {ttl} s)")
    # 4. every ticket done, its work merged on the shared main exactly once
    done = {t.id for t in store.tickets(states=[lifecycle.DONE])}
    every = {t.id for t in store.tickets()}
    for tid in sorted(every - done):
        out.append(f"{tid}: not done ({store.ticket(tid).state})")
    log = git.run(bare, "log", "--format=%B%x00", "main").stdout
    trailers = [ln.split(":", 1)[1].strip() for msg in log.split("\0") for ln in msg.splitlines() if ln.startswith(shared_main.TRAILER + ":")]
    files = git.run(bare, "ls-tree", "-r", "--name-only", "main").stdout.splitlines()
    for tid in sorted(every):
        n = trailers.count(tid)
        if n != 1:
            out.append(f"{tid}: merged on main {n} times")
        elif not any(f.startswith(f"work/{tid}-") for f in files):
            out.append(f"{tid}: merged but its work (work/{tid}-*) is not on main")
    if len(every) != tickets:
        out.append(f"{len(every)} tickets on the board, {tickets} expected")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaos.multihost")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="the game day: a throwaway PostgreSQL (or --url), real `healer up` hosts, the faults")
    r.add_argument("--url", help="an empty fleet schema's URL (default: start a throwaway cluster)")
    r.add_argument("--hosts", type=int, default=3)
    r.add_argument("--tickets", type=int, default=15)
    r.add_argument("--ttl", type=float, default=4.0, help="the supervisor lease ttl (hosts are lost after twice that)")
    r.add_argument("--partition", type=float, default=30.0)
    r.add_argument("--pause-db", type=float, default=10.0)
    r.add_argument("--partition-by", choices=["auto", "netns", "proxy"], default="auto",
                   help="a host's network path: its own network namespace (root, iproute2), or a blackholing proxy")
    a = ap.parse_args(argv)
    cluster = None
    url = a.url
    if url is None:
        cluster = pgcluster.Cluster().start()
        url = cluster.url
    try:
        rep = run(url, cluster, hosts=a.hosts, tickets=a.tickets, ttl=a.ttl, partition=a.partition, pause_db=a.pause_db,
                  timeout=600, netns={"auto": None, "netns": True, "proxy": False}[a.partition_by])
    finally:
        if cluster is not None:
            cluster.stop()
    print(json.dumps({"ok": rep.ok, "violations": rep.violations, **rep.facts}, indent=2))
    return 0 if rep.ok else 1


if __name__ == "__main__":
    sys.exit(main())
