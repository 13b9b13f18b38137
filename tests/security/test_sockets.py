"""Sockets and network of the sandbox (healer/netbox.py): a hostile agent (chaos/agents/hostile.py `sockets`)
tries every way out by a socket against real servers of the host on 127.0.0.1, a real Unix socket file and a
real abstract socket, under the real bwrap and the real loop. Network off with an allow-list: only the listed
endpoint answers, and it can only ever reach that endpoint. Network on: the host's Unix and abstract sockets
are still closed (seccomp). `none`: nothing is closed (the documented limit, shown here as the control)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from healer import endpoints, netbox, sandbox
from healer.errors import InvalidInput
from healer.policy.schema import Policy
from tests.security.conftest import need_bwrap, policy, readable_copy, run, target_repo


class Upstream:
    """A real HTTP-ish server on 127.0.0.1: answers `allowed <request line> host=<Host header>`, holds a
    `/flood` connection open until the client closes it, counts connections and the most open at once."""

    def __init__(self) -> None:
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(128)
        self.port = self.srv.getsockname()[1]
        self.requests: list[str] = []
        self.open = self.most = self.total = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c: socket.socket) -> None:
        with self.lock:
            self.open += 1
            self.total += 1
            self.most = max(self.most, self.open)
        try:
            c.settimeout(30)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = c.recv(4096)
                if not chunk:
                    break
                head += chunk
            lines = head.decode(errors="replace").split("\r\n")
            host = next((ln.split(":", 1)[1].strip() for ln in lines if ln.lower().startswith("host:")), "")
            with self.lock:
                self.requests.append(lines[0])
            if " /flood " in lines[0]:
                while c.recv(4096):
                    pass
                return
            body = f"allowed {lines[0]} host={host}".encode()
            c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        except OSError:
            pass
        finally:
            c.close()
            with self.lock:
                self.open -= 1

    def close(self) -> None:
        self.srv.close()


class Bait:
    """Listening sockets of the host the agent must not reach: TCP on 127.0.0.1, a Unix socket file, an
    abstract Unix socket. `touched()` names those that got a connection (a non-blocking accept)."""

    def __init__(self, folder: Path) -> None:
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.path = folder / "bait.sock"
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix.bind(str(self.path))
        self.abstract_name = f"healer-test-bait-{os.getpid()}-{id(self)}"
        self.abstract = socket.socket(socket.AF_UNIX)
        self.abstract.bind("\0" + self.abstract_name)
        for s in (self.tcp, self.unix, self.abstract):
            s.listen(16)
            s.setblocking(False)
        self.port = self.tcp.getsockname()[1]

    def touched(self) -> list[str]:
        got = []
        for name, s in (("tcp", self.tcp), ("unix", self.unix), ("abstract", self.abstract)):
            with contextlib.suppress(BlockingIOError):
                s.accept()[0].close()
                got.append(name)
        return got

    def close(self) -> None:
        for s in (self.tcp, self.unix, self.abstract):
            s.close()


@pytest.fixture
def world(tmp_path):
    up, bait = Upstream(), Bait(tmp_path)
    yield up, bait
    up.close()
    bait.close()


def attack(repo: Path, mode: str, up: Upstream, bait: Bait, *extra: str, run_id: str = "sockets", **loop) -> dict:
    specs = [f"tcp=127.0.0.1:{bait.port}", f"unix={bait.path}", f"abstract={bait.abstract_name}",
             f"allowed=http://127.0.0.1:{up.port}/x", *extra]
    out, _ = run(repo, policy(mode, "sockets", "report.json", *specs, **loop), run_id=run_id, allow_dirty=True)
    assert out.exit_code not in (0, 70), out
    return json.loads((repo / "report.json").read_text())


def test_network_off_with_an_allow_list_reaches_that_endpoint_and_nothing_else(tmp_path, world):
    need_bwrap()
    up, bait = world
    repo = target_repo(tmp_path / "repo")
    got = attack(repo, "bwrap", up, bait, f"denied=127.0.0.1:{bait.port}", f"pivot=127.0.0.1:{bait.port}",
                 sandbox_network=False, sandbox_network_allow=[f"127.0.0.1:{up.port}"])
    assert got["allowed"] == f"ok allowed GET /x HTTP/1.1 host=127.0.0.1:{up.port}"  # the HTTP round trip
    for k in ("tcp", "denied", "unix", "abstract", "af_unix", "af_vsock", "io_uring", "pidfd_getfd"):
        assert got[k].startswith("refused"), (k, got[k])
    assert "Operation not permitted" in got["af_unix"] and "Operation not permitted" in got["io_uring"]
    assert got["socketpair"] == "ok x"
    # the relay cannot be pointed elsewhere: CONNECT, an absolute URL and a Host header all land on the
    # allowed endpoint, whatever they name
    assert got["pivot"].startswith("ok [") and got["pivot"].count("200 OK") == 3, got["pivot"]
    assert f"CONNECT 127.0.0.1:{bait.port} HTTP/1.1" in up.requests
    assert f"GET http://127.0.0.1:{bait.port}/pivot HTTP/1.0" in up.requests
    assert bait.touched() == []


def test_network_on_still_closes_the_hosts_unix_and_abstract_sockets(tmp_path, world):
    need_bwrap()
    up, bait = world
    repo = target_repo(tmp_path / "repo")
    got = attack(repo, "bwrap", up, bait)  # sandbox_network: null is on under bwrap
    for k in ("unix", "abstract", "af_unix", "af_vsock"):
        assert got[k].startswith("refused") and "Operation not permitted" in got[k], (k, got[k])
    assert got["socketpair"] == "ok x"
    # network on is the host's network, its loopback included (docs/security.md, known limits)
    assert got["tcp"].startswith("ok") and got["allowed"].startswith("ok allowed")
    assert bait.touched() == ["tcp"]


def test_the_policy_may_open_unix_sockets_and_none_closes_nothing(tmp_path, world):
    need_bwrap()
    up, bait = world
    repo = target_repo(tmp_path / "repo")
    got = attack(repo, "bwrap", up, bait, sandbox_network=False, sandbox_unix_sockets=True)
    assert got["unix"] == "ok" and got["af_unix"] == "ok"
    assert got["abstract"].startswith("refused")  # abstract sockets belong to the network namespace: its own
    assert got["tcp"].startswith("refused") and got["allowed"].startswith("refused")
    assert got["io_uring"].startswith("refused")  # the rest of the filter stays
    assert bait.touched() == ["unix"]
    # `none`: healer cannot stop sockets (the documented limit)
    got = attack(repo, "none", up, bait, run_id="none")
    assert got["unix"] == "ok" and got["abstract"] == "ok" and got["tcp"].startswith("ok")
    assert sorted(bait.touched()) == ["abstract", "tcp", "unix"]


def test_a_flood_through_the_relay_is_bounded(tmp_path, world, monkeypatch):
    need_bwrap()
    up, bait = world
    monkeypatch.setattr(netbox, "MAX_CONNECTIONS", 4)
    repo = target_repo(tmp_path / "repo")
    got = attack(repo, "bwrap", up, bait, f"flood=127.0.0.1:{up.port}:24", sandbox_network=False,
                 sandbox_network_allow=[f"127.0.0.1:{up.port}"])
    assert got["flood"] == "ok 24 held 0 refused"  # accepted inside (the relay's listen backlog)...
    assert 1 <= up.most <= 4, up.most  # ...but never more than MAX_CONNECTIONS reach the endpoint at once
    assert got["allowed"].startswith("ok allowed")


def test_a_host_name_answers_on_its_alias_and_a_low_port_moves(tmp_path, world):
    """A listed name resolves inside through the sandbox's /etc/hosts, to a loopback alias where the relay
    listens; the relay resolves it on the host. The name used: one of the host's /etc/hosts names for
    127.0.0.1 other than localhost (`localhost` itself, when there is none)."""
    need_bwrap()
    up, _bait = world
    names = [n for ln in Path("/etc/hosts").read_text().splitlines() if ln.split("#")[0].split()[:1] == ["127.0.0.1"]
             for n in ln.split("#")[0].split()[1:] if n != "localhost"]
    name = names[0] if names else "localhost"
    d = tmp_path / "w"
    d.mkdir()
    prof = sandbox.Profile(workdir=d, rw=[d], network=False, allow=[(name, up.port), ("localhost", 80)])
    probe = ("import socket, urllib.request\n"
             f"print(socket.gethostbyname({name!r}))\n"
             f"print(urllib.request.urlopen('http://{name}:{up.port}/named', timeout=10).read().decode())\n"
             "s = socket.socket(); s.bind(('127.0.0.1', 0)); print('bound')\n")
    res = sandbox.run(prof, [sys.executable, "-c", probe], d / "err", "probe", cwd=d, timeout=60, grace=1,
                      stdout=open(d / "out", "w"), stderr=open(d / "err", "w"))
    assert res.exit_code == 0, (d / "err").read_text()
    lines = (d / "out").read_text().splitlines()
    assert lines[0] == ("127.0.0.2" if name != "localhost" else "127.0.0.1")
    assert lines[1] == f"allowed GET /named HTTP/1.1 host={name}:{up.port}"
    hosts = netbox.hosts_file([("api.example.com", 443), ("localhost", 8080)],
                              "127.0.0.1 localhost\n::1 localhost ip6-localhost\n10.1.1.1 api.example.com other # x\n")
    assert hosts == "127.0.0.1 localhost\n::1 ip6-localhost\n10.1.1.1 other\n127.0.0.2 api.example.com\n"
    big = "".join(f"0.0.0.0 blocked{i}.example\n" for i in range(20000))  # a block list: more than a pipe holds
    plumbing = netbox.Plumbing(False, [("api.example.com", 443)])
    try:
        assert plumbing.args[0] == "--seccomp" and plumbing.args[2] == "--ro-bind-data"
        fd = plumbing._data_fd(netbox.hosts_file([("api.example.com", 443)], big).encode())
        assert len(os.read(fd, 1 << 21)) > 65536
    finally:
        plumbing.close()
    assert endpoints.inside_url("https://api.anthropic.com/v1") == "https://api.anthropic.com:10443/v1"
    assert endpoints.inside_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080"


def test_allow_list_entries_are_checked_where_they_are_written(tmp_path):
    def loop(**kw):
        return Policy.model_validate({"version": 1, "loop": kw}).loop

    assert loop(sandbox_network_allow=["api.anthropic.com:443", "[::1]:8080"]).sandbox_network_allow
    for bad in (["api.anthropic.com"], ["10.0.0.5:80"], ["a b:80"], ["x:0"], ["x:70000"]):
        with pytest.raises(ValueError, match="sandbox_network_allow"):
            loop(sandbox_network_allow=bad)
    with pytest.raises(ValueError, match="reaches everything"):
        loop(sandbox_network=True, sandbox_network_allow=["localhost:80"])
    with pytest.raises(InvalidInput, match="container sandbox has no allow-list"):
        sandbox.loop_profile(Path("/nonexistent-never-made"), [], None, "container", allow=[("localhost", 80)])
    pol = Policy.model_validate({"version": 1, "loop": {"sandbox_network_allow": ["localhost:8080"]}}).loop
    prof = sandbox.gate_profile(tmp_path / "checkout", pol, "bwrap", tmp_path / "tmp")  # the fleet's gates: the same
    assert prof.network is False and prof.allow == [("localhost", 8080)] and prof.unix_sockets is False
    assert endpoints.endpoint_of("https://api.anthropic.com") == ("api.anthropic.com", 443)
    assert endpoints.endpoint_of("http://[::1]:9000/v1") == ("::1", 9000)


def _verdict(prog: bytes, arch: int, nr: int, arg0: int = 0) -> int:
    """What the kernel would return for this syscall: the program run by a minimal classic-BPF interpreter
    (the four instructions it uses), on a seccomp_data of (nr, arch, ip 0, args)."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    ins = [struct.unpack("=HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
    pc, acc = 0, 0
    for _ in range(len(ins)):
        code, jt, jf, k = ins[pc]
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == 0x06:  # ret k
            return k
        elif code in (0x15, 0x35):  # jeq / jge k
            pc += jt if (acc == k if code == 0x15 else acc >= k) else jf
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")
        pc += 1
    raise AssertionError("ran off the program")


def test_the_filter_is_the_program_it_says():
    """The BPF program's verdicts, for each arch it handles, by an interpreter of its instructions."""
    allow, kill, eperm, enosys = 0x7FFF0000, 0x80000000, 0x00050001, 0x00050026
    x86, i386, a64, arm = 0xC000003E, 0x40000003, 0xC00000B7, 0x40000028
    prog = netbox.seccomp_filter("x86_64")
    assert _verdict(prog, x86, 41, socket.AF_UNIX) == eperm  # socket(AF_UNIX)
    assert _verdict(prog, x86, 41, socket.AF_UNIX | (1 << 32)) == eperm  # high bits: the kernel reads an int
    assert _verdict(prog, x86, 41, socket.AF_INET) == allow and _verdict(prog, x86, 41, socket.AF_INET6) == allow
    assert _verdict(prog, x86, 41, socket.AF_NETLINK) == allow  # getaddrinfo's interface check
    for family in (socket.AF_VSOCK, socket.AF_PACKET, 30, 44, 0, 1 << 31):  # vsock, packet, TIPC, XDP, nonsense
        assert _verdict(prog, x86, 41, family) == eperm
    assert _verdict(prog, x86, 53, socket.AF_UNIX) == allow  # socketpair
    for nr in (425, 426, 427, 438):  # io_uring_setup/enter/register, pidfd_getfd
        assert _verdict(prog, x86, nr) == eperm
    assert _verdict(prog, x86, 0x40000000 | 41, socket.AF_UNIX) == enosys  # x32
    assert _verdict(prog, x86, 0) == allow  # read
    assert _verdict(prog, i386, 359, socket.AF_UNIX) == eperm and _verdict(prog, i386, 102) == enosys  # socketcall
    assert _verdict(prog, i386, 359, socket.AF_INET) == allow
    assert _verdict(prog, a64, 41) == kill  # an arch this kernel does not run
    prog = netbox.seccomp_filter("aarch64")
    assert _verdict(prog, a64, 198, socket.AF_UNIX) == eperm and _verdict(prog, a64, 198, socket.AF_INET6) == allow
    assert _verdict(prog, a64, 425) == eperm and _verdict(prog, arm, 281, socket.AF_UNIX) == eperm
    assert _verdict(prog, arm, 102) == enosys and _verdict(prog, x86, 0) == kill
    opened = netbox.seccomp_filter("x86_64", unix=True)
    assert _verdict(opened, x86, 41, socket.AF_UNIX) == allow and _verdict(opened, x86, 425) == eperm
    assert _verdict(opened, x86, 41, socket.AF_VSOCK) == eperm
    assert netbox.seccomp_filter("riscv64") is None


SYSTEM_PYTHON = "/usr/bin/python3"
UNPRIVILEGED = """
import json, sys
from pathlib import Path
from healer import sandbox
d, up, bait = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
prof = sandbox.Profile(workdir=d, rw=[d], network=False, allow=[("127.0.0.1", up)])
argv = [sys.executable, sys.argv[4], "sockets", str(d / "report.json"), "unix=" + bait, "abstract=" + sys.argv[5],
        f"allowed=http://127.0.0.1:{up}/user", "tcp=127.0.0.1:" + sys.argv[6]]
res = sandbox.run(prof, argv, d / "err", "agent", cwd=d, timeout=60, grace=1, stdout=open(d / "out", "w"),
                  stderr=open(d / "err", "w"))
print(res.exit_code)
"""


def test_the_same_holds_for_an_unprivileged_caller(tmp_path, world):
    """healer run by an ordinary user (uid 65534 here): bwrap then makes a user namespace, and the filter and
    the relay work the same."""
    need_bwrap()
    if os.getuid() != 0 or shutil.which("setpriv") is None or not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(reason=f"needs root (to become an unprivileged user), setpriv and {SYSTEM_PYTHON}")
    up, bait = world
    # healer, the hostile agent and psutil (healer's process sweep: a user has no writable cgroup) copied where the
    # user can read them; the system's Python, as the virtualenv's may sit under a folder the user cannot enter
    # (/root, a clean clone in a `mktemp -d`): the part of healer this needs imports nothing else
    with readable_copy("healer", "chaos/agents/hostile.py") as top:
        d = top / "u"
        d.mkdir()
        os.chown(d, 65534, 65534)
        os.chmod(bait.path, 0o777)  # the file system would let it in: only the filter stands in the way
        env = {**os.environ, "HOME": str(d), "XDG_CACHE_HOME": str(d / ".cache"), "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONPATH": str(top)}
        r = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", SYSTEM_PYTHON,
                            "-c", UNPRIVILEGED, str(d), str(up.port), str(bait.path), str(top / "hostile.py"),
                            bait.abstract_name, str(bait.port)], capture_output=True, text=True, timeout=120, env=env,
                           cwd=str(top))
        said = r.stdout + r.stderr + "".join(f.read_text() for f in (d / "err", d / "out") if f.exists())
        assert r.returncode == 0 and (d / "report.json").exists(), said
        got = json.loads((d / "report.json").read_text())
    assert got["allowed"] == f"ok allowed GET /user HTTP/1.1 host=127.0.0.1:{up.port}"
    for k in ("unix", "abstract", "tcp", "af_unix", "af_vsock", "io_uring"):
        assert got[k].startswith("refused"), (k, got[k])
    assert got["socketpair"] == "ok x"
    assert bait.touched() == []


def test_an_init_that_cannot_listen_is_a_broken_sandbox_and_a_missing_program_is_127(tmp_path):
    """The allow-list's init stands between bwrap and the program: its own failure is the sandbox's (exit 69,
    never an agent that ran), a program that does not exist is exit 127 as without it."""
    need_bwrap()
    d = tmp_path / "w"
    d.mkdir()
    bad = sandbox.Profile(workdir=d, rw=[d], network=False, allow=[("10.0.0.5", 8080)])  # no such address inside
    kw = {"cwd": d, "timeout": 60, "grace": 1}
    with pytest.raises(sandbox.SandboxFailed) as e, open(d / "err", "w") as err:
        sandbox.run(bad, [sys.executable, "-c", "print('ran')"], d / "err", "the agent", stdout=err, stderr=err, **kw)
    assert e.value.exit_code == 69 and "cannot listen on 10.0.0.5:8080" in str(e.value)
    good = sandbox.Profile(workdir=d, rw=[d], network=False, allow=[("127.0.0.1", 8080)])
    with open(d / "err2", "w") as err:
        res = sandbox.run(good, [str(d / "not-there.sh")], d / "err2", "a gate", stdout=err, stderr=err, **kw)
    assert res.exit_code == 127


def test_a_machine_without_the_filter_is_told_once(monkeypatch):
    need_bwrap()
    monkeypatch.setattr(netbox, "_filters", {False: None})  # as on an arch the filter does not handle
    monkeypatch.setattr(sandbox, "_warned", set())
    mode, warn = sandbox.resolve("bwrap")
    assert mode == "bwrap" and "Unix sockets stay open" in warn
    assert sandbox.resolve("auto") == ("bwrap", None)


def test_an_allow_list_under_none_is_said_to_restrict_nothing(tmp_path, capfd):
    repo = target_repo(tmp_path / "repo")
    out, _ = run(repo, policy("none", "tmp", f"net-none-{os.getpid()}", sandbox_network_allow=["localhost:8080"]))
    assert out.exit_code not in (0, 70)
    assert "sandbox_network_allow: the agent runs unsandboxed (none): its network is not restricted" in capfd.readouterr().err
    for p in (Path(tempfile.gettempdir()) / f"net-none-{os.getpid()}", Path("/tmp") / f"net-none-{os.getpid()}"):
        p.unlink(missing_ok=True)  # what the unsandboxed agent wrote
