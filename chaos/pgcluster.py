"""A throwaway PostgreSQL cluster: initdb in a temp folder, a port on 127.0.0.1, trust auth for
this cluster only, stopped and removed at the end. Used by the store tests (when CI did not start
one), the multi-host game day (whose faults SIGSTOP the server) and `python -m chaos.pgcluster`.

initdb refuses to run as root: as root the cluster belongs to the `postgres` system user (Debian's
package creates it) and every server command runs through `runuser -u postgres`.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

from healer.clock import system

BIN_DIRS = ["/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"]


def find_bin(name: str) -> str | None:
    for d in BIN_DIRS:
        p = Path(d) / name
        if p.exists():
            return str(p)
    return shutil.which(name)


def available() -> bool:
    return bool(find_bin("initdb") and find_bin("pg_ctl")) and (os.geteuid() != 0 or _system_user() is not None)


def _system_user() -> str | None:
    for name in ("postgres",):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            pass
    return None


# the guard of a cluster (Cluster._arm_reaper): waits for its owner's end, then stops what is left
_REAPER = """
import os, shutil, subprocess, sys
sys.stdin.buffer.read()
folder, stop = sys.argv[1], sys.argv[2:]
if os.path.isdir(folder):
    subprocess.run(stop, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60, cwd=folder)
    shutil.rmtree(folder, ignore_errors=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, port: int | None = None, user: str = "healer") -> None:
        self.port = port or free_port()
        self.user = user
        self.dir = Path(tempfile.mkdtemp(prefix="healer-pg."))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.as_user = _system_user() if os.geteuid() == 0 else None
        self.pid: int | None = None

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def _run(self, argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
        if self.as_user:
            argv = ["runuser", "-u", self.as_user, "--", *argv]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=self.dir)

    def start(self) -> Cluster:
        if self.as_user:
            shutil.chown(self.dir, self.as_user)
        self._arm_reaper()  # before the server exists: an owner killed while it starts leaves nothing either
        r = self._run([find_bin("initdb") or "initdb", "-D", str(self.data), "-A", "trust", "-U", self.user,
                       "-E", "UTF8", "--no-sync", "--locale=C"])
        if r.returncode:
            raise RuntimeError(f"initdb failed: {r.stderr.strip()[-400:]}")
        # trust for this cluster only, on loopback only; fsync off: a throwaway cluster
        opts = (f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} -c fsync=off -c synchronous_commit=off "
                "-c full_page_writes=off -c max_connections=200 -c shared_buffers=64MB")
        self._opts = opts
        r = self._run([find_bin("pg_ctl") or "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "-t", "60", "start"])
        if r.returncode:
            raise RuntimeError(f"pg_ctl start failed: {r.stderr.strip()[-400:]} {self.tail_log()}")
        self.pid = int((self.data / "postmaster.pid").read_text().split()[0])
        return self

    def _arm_reaper(self) -> None:
        """A guard in a session of its own that reads a pipe only this process holds: when this process ends
        without `stop()` (SIGKILLed, a test run cut short), the pipe closes and the guard stops the server and
        removes its folder, so no cluster outlives its owner in the temp folder. `stop()` closes the pipe too;
        the guard then finds the folder gone and does nothing."""
        pg_ctl = find_bin("pg_ctl") or "pg_ctl"
        stop = [pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop"]
        if self.as_user:
            stop = ["runuser", "-u", self.as_user, "--", *stop]
        self._reaper = subprocess.Popen(
            [sys.executable, "-c", _REAPER, str(self.dir), *stop], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)

    def restart(self, mode: str = "fast") -> None:
        """`pg_ctl restart -m fast`, an operator's routine restart: every connection is ended, the server is back
        when this returns (its options are the ones it was started with)."""
        self._ctl("restart", "-m", mode)

    def halt(self, mode: str = "fast") -> None:
        """Stop the server but keep the cluster (`resume_server` starts it again)."""
        self._ctl("stop", "-m", mode)

    def resume_server(self) -> None:
        self._ctl("start", "-o", self._opts)

    def _ctl(self, *args: str) -> None:
        r = self._run([find_bin("pg_ctl") or "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", *args])
        if r.returncode:
            raise RuntimeError(f"pg_ctl {args[0]} failed: {r.stderr.strip()[-400:]} {self.tail_log()}")
        pidfile = self.data / "postmaster.pid"
        self.pid = int(pidfile.read_text().split()[0]) if pidfile.exists() else None

    def read_only(self, on: bool = True) -> None:
        """The whole server takes no writes (`default_transaction_read_only = on` for every session, the ones open
        included: ALTER SYSTEM and a reload), as an operator's maintenance switch or a standby not promoted yet does;
        `read_only(False)` takes it back. Through psql (no driver outside healer's store); returns once a fresh
        session sees the new value."""
        want = "on" if on else "off"
        psql = [find_bin("psql") or "psql", "-X", "-q", "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user,
                "-d", "postgres", "-v", "ON_ERROR_STOP=1"]
        r = self._run([*psql, "-c", "SET default_transaction_read_only = off",  # this session may write the setting
                       "-c", f"ALTER SYSTEM SET default_transaction_read_only = {want}", "-c", "SELECT pg_reload_conf()"])
        if r.returncode:
            raise RuntimeError(f"psql failed: {r.stderr.strip()[-400:]}")
        clock = system()
        deadline = clock.monotonic() + 30
        while clock.monotonic() < deadline:  # the reload is asynchronous: the postmaster signals its backends
            if self._run([*psql, "-At", "-c", "SHOW default_transaction_read_only"]).stdout.strip() == want:
                return
            clock.sleep(0.05)
        raise RuntimeError(f"default_transaction_read_only did not become {want} within 30s")

    def tail_log(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text().splitlines()[-n:])
        except OSError:
            return ""

    def pause(self) -> None:
        """SIGSTOP the postmaster and every backend (a frozen database host)."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, sig: int) -> None:
        for pid in self._tree():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass  # a backend that ended between the listing and the signal (a client hung up)

    def _tree(self) -> list[int]:
        if self.pid is None:
            return []
        try:
            p = psutil.Process(self.pid)
            return [p.pid] + [c.pid for c in p.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def stop(self) -> None:
        if self.pid is not None:
            self.resume()  # a stopped server cannot shut down
            r = self._run([find_bin("pg_ctl") or "pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop"])
            if r.returncode and self.pid:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.pid = None
        shutil.rmtree(self.dir, ignore_errors=True)
        reaper = getattr(self, "_reaper", None)
        if reaper is not None:
            reaper.stdin.close()  # the folder is gone: the guard exits
            reaper.wait(30)
            self._reaper = None

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> int:
    """`python -m chaos.pgcluster`: start a cluster, print its URL, stop it on SIGTERM/SIGINT/EOF."""
    c = Cluster().start()
    print(c.url, flush=True)
    stop = {"now": False}

    def _stop(*_):
        stop["now"] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    clock = system()
    try:
        while not stop["now"]:
            clock.sleep(0.2)
    finally:
        c.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
