"""Sockets and network of the bwrap sandbox (healer/sandbox.py calls in here for every program it wraps).

Two things the mount namespace cannot do:

* **Unix sockets.** A read-only bind does not stop connect() on a socket file (docker.sock, PostgreSQL's
  socket, dbus), and abstract sockets have no file at all (they belong to the network namespace: with
  network on, the host's). So, in every bwrap mode, a seccomp filter given to bwrap (`--seccomp FD`)
  refuses socket(AF_UNIX, ...) with EPERM; socketpair() still works (pipes between a program's own
  processes: Node, Python's subprocess and asyncio use it). The same filter refuses io_uring (its
  IORING_OP_SOCKET would make the socket the filter refuses) and pidfd_getfd (it would copy a connected
  socket out of another process), and every socket family but IP, netlink and AF_ALG (AF_VSOCK would reach a
  VM's hypervisor from any network namespace). `loop.sandbox_unix_sockets: true` lifts the AF_UNIX rule (for a
  project whose tests need a Unix socket); the rest stays. This is how Anthropic's sandbox-runtime closes Unix
  sockets under bubblewrap too.

  The filter is a small classic-BPF program built here by hand (`seccomp_filter`): one arch check, three
  syscall numbers and one argument. libseccomp would write the same program; its Python bindings are a
  Debian package outside the virtualenv (python3-seccomp) or a ctypes wrapper last released in 2021
  (pyseccomp), and the program is short enough to read and to test instruction by instruction
  (tests/security/test_sockets.py runs it under the real bwrap). x86-64 (with i386 and x32) and aarch64
  (with 32-bit arm) hosts; elsewhere no filter is built (`unix_filter_missing()` words it) and Unix sockets
  stay open.

* **An allow-list** (`loop.sandbox_network_allow: ["host:port", ...]`) with network off: the sandbox keeps
  its own network namespace (`--unshare-net`, only a loopback) and exactly the listed endpoints answer in
  it. Before the program, a tiny init (healer/netinit.py, run by the sandbox's Python) binds one listening
  TCP socket per endpoint inside the namespace (127.0.0.1:PORT for a loopback entry; a loopback alias
  127.0.0.N that the sandbox's /etc/hosts gives the host name otherwise) and hands the listening sockets
  themselves to healer over an inherited socketpair (SCM_RIGHTS), then closes it and execs the program.
  healer's relay (a thread of the process that launched bwrap) accepts on those sockets from outside and
  connects each connection to the one host:port that socket stands for, resolved on the host. The agent
  never holds a channel to the relay: the only thing it can do is connect to a listed address, and the
  relay's destination is fixed by which socket accepted, never by anything the agent sends. At most
  `MAX_CONNECTIONS` at once per program; more wait in the listen backlog (bounded by the kernel); each
  direction moves through one 64 KiB buffer. No allow-list: no init, no relay, nothing started.

  A port below 1024 cannot be bound inside without a capability the sandbox does not hold (bwrap drops
  them all; as an unprivileged user even `--cap-add` does not reach the namespace), so such an endpoint
  answers inside on `inside_port(port)` (443 -> 10443): `inside_url()` rewrites a base URL accordingly
  (TLS checks the host name, not the port, so `https://api.anthropic.com:10443` reaches the real API).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import selectors
import socket
import struct
import sys
import threading
from pathlib import Path
from typing import cast

from healer.endpoints import listen_addresses

MAX_CONNECTIONS = 32  # relayed at once per program; more wait in the kernel's listen backlog
BUFFER = 65536
CONNECT_TIMEOUT = 10.0
NETINIT = Path(__file__).with_name("netinit.py")

# classic BPF (linux/filter.h, linux/seccomp.h, linux/audit.h)
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW, _RET_KILL_PROCESS, _RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_EPERM, _ENOSYS = 1, 38
_AF_UNIX = 1
_X32_BIT = 0x40000000
# arch -> (socket, socketcall or None); io_uring_setup/enter/register (425-427) and pidfd_getfd (438) have
# the same numbers on every arch (the unified table since 5.1)
_ARCHES = {
    0xC000003E: (41, None),  # AUDIT_ARCH_X86_64
    0x40000003: (359, 102),  # AUDIT_ARCH_I386 (socketcall's arguments sit in memory: it is refused whole)
    0xC00000B7: (198, None),  # AUDIT_ARCH_AARCH64
    0x40000028: (281, 102),  # AUDIT_ARCH_ARM
}
_HOSTS = {"x86_64": (0xC000003E, 0x40000003), "aarch64": (0xC00000B7, 0x40000028)}
_ALWAYS = (425, 426, 427, 438)
# the socket families a sandboxed program may make: IP, netlink (glibc's getaddrinfo asks the kernel for the
# interfaces through it), the kernel's crypto API. Not AF_UNIX (the host's sockets), not AF_VSOCK (a VM's
# channel to its hypervisor, in no network namespace), not AF_PACKET, AF_TIPC, AF_RDS, AF_XDP, ...
_DOMAINS = (2, 10, 16, 38)  # AF_INET, AF_INET6, AF_NETLINK, AF_ALG


def seccomp_filter(machine: str | None = None, unix: bool = False) -> bytes | None:
    """The BPF program bwrap loads before it execs the program (None: not a host arch handled here).
    Every syscall is allowed but: socket() of a family outside `_DOMAINS` (AF_UNIX allowed with `unix`) (EPERM),
    socketcall (i386/arm: its
    arguments cannot be read by a filter, ENOSYS: glibc then uses socket()), io_uring_* and pidfd_getfd
    (EPERM), every x32 syscall (ENOSYS: x32 binaries are all but extinct and their numbers would need a
    second table). A syscall of an arch this kernel cannot run kills the process."""
    arches = _HOSTS.get(machine or os.uname().machine)
    if arches is None:
        return None
    prog: list[tuple[int, int | str, int | str, int]] = [(_LD_W_ABS, 0, 0, 4)]  # seccomp_data.arch
    for i, arch in enumerate(arches):
        prog.append((_JEQ_K, f"arch{i}", 0, arch))
    prog.append((_RET_K, 0, 0, _RET_KILL_PROCESS))
    labels: dict[str, int] = {}
    for i, arch in enumerate(arches):
        sock, socketcall = _ARCHES[arch]
        labels[f"arch{i}"] = len(prog)
        prog.append((_LD_W_ABS, 0, 0, 0))  # seccomp_data.nr
        if arch == 0xC000003E:
            prog.append((_JGE_K, "nosys", 0, _X32_BIT))
        if socketcall is not None:
            prog.append((_JEQ_K, "nosys", 0, socketcall))
        for nr in _ALWAYS:
            prog.append((_JEQ_K, "eperm", 0, nr))
        prog.append((_JEQ_K, "domain", 0, sock))
        prog.append((_RET_K, 0, 0, _RET_ALLOW))
    labels["domain"] = len(prog)
    prog.append((_LD_W_ABS, 0, 0, 16))  # the low 32 bits of args[0] (little-endian hosts): the domain, an int
    for domain in (*_DOMAINS, *((_AF_UNIX,) if unix else ())):
        prog.append((_JEQ_K, "allow", 0, domain))
    prog.append((_RET_K, 0, 0, _RET_ERRNO | _EPERM))
    labels["allow"] = len(prog)
    prog.append((_RET_K, 0, 0, _RET_ALLOW))
    labels["eperm"] = len(prog)
    prog.append((_RET_K, 0, 0, _RET_ERRNO | _EPERM))
    labels["nosys"] = len(prog)
    prog.append((_RET_K, 0, 0, _RET_ERRNO | _ENOSYS))
    out = b""
    for pc, (code, jt, jf, k) in enumerate(prog):
        jt = labels[jt] - pc - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - pc - 1 if isinstance(jf, str) else jf
        assert 0 <= jt < 256 and 0 <= jf < 256
        out += struct.pack("=HBBI", code, jt, jf, k)
    return out


_filters: dict[bool, bytes | None] = {}


def _filter(unix: bool) -> bytes | None:
    if unix not in _filters:
        _filters[unix] = seccomp_filter(unix=unix)
    return _filters[unix]


def unix_filter_missing() -> str | None:
    """Why Unix sockets stay open under bwrap on this machine (None: the filter is built)."""
    if _filter(False) is None:
        return f"no seccomp filter for this machine ({os.uname().machine}): Unix sockets stay open in the sandbox"
    return None


# ---- the allow-list ----------------------------------------------------------------------------------------


def hosts_file(allow: list[tuple[str, int]], base: str | None = None) -> str:
    """The sandbox's /etc/hosts: the host's, each listed name taken off the lines that had it (and `localhost` off
    the IPv6 ones when it is listed: it answers on 127.0.0.1 only), plus each listed name on its alias (the name
    must resolve without DNS: the namespace has none)."""
    listen = listen_addresses(allow)
    names = {h: listen[(h, p)][0] for h, p in allow if h != "localhost" and not _is_ip(h)}
    local = any(h == "localhost" for h, _p in allow)
    if base is None:
        try:
            base = Path("/etc/hosts").read_text(errors="replace")
        except OSError:
            base = "127.0.0.1 localhost\n"
    out = []
    for ln in base.splitlines():
        fields = ln.split("#", 1)[0].split()
        if len(fields) < 2:
            out.append(ln)
            continue
        keep = [n for n in fields[1:] if n.lower() not in names and not (local and n == "localhost" and ":" in fields[0])]
        if keep:
            out.append(" ".join([fields[0], *keep]))
    return "\n".join(out + [f"{a} {n}" for n, a in names.items()]) + "\n"


def _is_ip(h: str) -> bool:
    try:
        ipaddress.ip_address(h)
        return True
    except ValueError:
        return False


# ---- per program: what bwrap gets, and the relay ----------------------------------------------------------


class Plumbing:
    """The sockets part of one bwrap run: `args` (bwrap options), `prefix` (the init before the program,
    empty without an allow-list), `pass_fds`. Then `check()` after the program ended (the init failed:
    a broken sandbox, not a program that ran), and `close()`."""

    def __init__(self, network: bool, allow: list[tuple[str, int]], unix: bool = False) -> None:
        self.args: list[str] = []
        self.prefix: list[str] = []
        self.pass_fds: list[int] = []
        self._close: list[int] = []
        self.relay: Relay | None = None
        self._inner: socket.socket | None = None
        try:
            prog = _filter(unix)
            if prog is not None:
                self.args += ["--seccomp", str(self._data_fd(prog))]
            if allow and not network:
                listen = listen_addresses(allow)
                outer, inner = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                self._inner = inner
                self.pass_fds.append(inner.fileno())
                self.relay = Relay(outer, [(ep, listen[ep]) for ep in allow])
                hosts = os.path.realpath("/etc/hosts")
                self.args += ["--ro-bind-data", str(self._data_fd(hosts_file(allow).encode())), hosts]
                spec = ",".join(f"{a}:{p}" for a, p in (listen[ep] for ep in allow))
                self.prefix = [sys.executable, "-I", "-S", str(NETINIT), str(inner.fileno()), spec, "--"]
                self.relay.start()
        except BaseException:
            self.close()
            raise

    def _data_fd(self, data: bytes) -> int:
        """An anonymous file holding `data`, read by bwrap from its start to its end. Not a pipe: a host's
        /etc/hosts can be larger than a pipe holds (block lists of megabytes), and nobody reads it before the
        program starts. One per program: bwrap's reading moves the offset every copy of the fd shares."""
        fd = os.memfd_create("healer-sandbox", os.MFD_CLOEXEC)
        self._close.append(fd)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
        self.pass_fds.append(fd)
        return fd

    def check(self) -> str | None:
        """After the program ended: why the init did not hand over its sockets (None: it did, or there was
        none). The program's own failures are its own: this is only the init's."""
        if self.relay is None:
            return None
        if self._inner is not None:
            self._inner.close()  # ours; the init's copy is gone with it: the relay now sees its message or EOF
            self._inner = None
        self.relay.ready.wait(10)
        return self.relay.failed

    def close(self) -> None:
        for fd in self._close:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._close = []
        if self._inner is not None:
            self._inner.close()
            self._inner = None
        if self.relay is not None:
            self.relay.stop()


class Relay(threading.Thread):
    """Host side of the allow-list: receives the init's listening sockets, then for each connection accepted
    on one of them connects to the endpoint that socket was made for and copies bytes both ways."""

    def __init__(self, chan: socket.socket, routes: list[tuple[tuple[str, int], tuple[str, int]]]) -> None:
        super().__init__(name="healer-netbox-relay", daemon=True)
        self.chan = chan
        self.routes = routes  # (endpoint on the host, address it answers on inside)
        self.ready = threading.Event()
        self.failed: str | None = None
        self._stop_r, self._stop_w = os.pipe()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._open: set[socket.socket] = set()
        self._stopped = False
        self.relayed = 0  # connections relayed so far (tests)

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            with contextlib.suppress(OSError):
                os.write(self._stop_w, b"x")
            for s in list(self._open):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
        if self.is_alive() and threading.current_thread() is not self:
            self.join(5)
        for fd in (self._stop_r, self._stop_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _receive(self) -> list[socket.socket] | None:
        sel = selectors.DefaultSelector()
        try:
            sel.register(self.chan, selectors.EVENT_READ)
            sel.register(self._stop_r, selectors.EVENT_READ)
            if not any(k.fileobj is self.chan for k, _ in sel.select()):
                return None
            msg, fds, _flags, _addr = socket.recv_fds(self.chan, 4096, len(self.routes) + 1)
        except OSError as e:
            self.failed = f"the sandbox's network init: {e}"
            return None
        finally:
            sel.close()
            self.chan.close()
        socks = [socket.socket(fileno=fd) for fd in fds]
        said = msg.decode("utf-8", "replace")
        expected = "listening " + ",".join(f"{a}:{p}" for _ep, (a, p) in self.routes)
        ok = (said == expected and len(socks) == len(self.routes)
              and all(s.type == socket.SOCK_STREAM and s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                      for s in socks))
        if not ok:
            for s in socks:
                s.close()
            why = said.removeprefix("error ") if said.startswith("error ") else ""
            self.failed = why or "the sandbox's network init handed over no listening sockets"
            return None
        return socks

    def run(self) -> None:
        try:
            socks = self._receive()
        finally:
            self.ready.set()
        if socks is None:
            return
        sel = selectors.DefaultSelector()
        try:
            for s, (ep, _inside) in zip(socks, self.routes, strict=True):
                s.setblocking(False)
                sel.register(s, selectors.EVENT_READ, ep)
            sel.register(self._stop_r, selectors.EVENT_READ)
            while True:
                for key, _ in sel.select():
                    if key.fileobj == self._stop_r:
                        return
                    self._slots.acquire()  # a free slot before the next accept: the rest wait in the backlog
                    listener = cast(socket.socket, key.fileobj)  # registered above: the listening sockets
                    try:
                        conn, _ = listener.accept()
                    except OSError:
                        self._slots.release()
                        continue
                    threading.Thread(target=self._pipe, args=(conn, key.data), daemon=True,
                                     name="healer-netbox-conn").start()
        finally:
            sel.close()
            for s in socks:
                s.close()

    def _track(self, s: socket.socket) -> bool:
        with self._lock:
            if self._stopped:
                return False
            self._open.add(s)
            return True

    def _pipe(self, down: socket.socket, ep: tuple[str, int]) -> None:
        up = None
        try:
            down.setblocking(True)
            if not self._track(down):
                return
            try:
                up = socket.create_connection(ep, timeout=CONNECT_TIMEOUT)
            except OSError:
                return  # the agent sees its connection closed, as if the endpoint refused
            up.settimeout(None)
            if not self._track(up):
                return
            self.relayed += 1
            _copy(down, up)
        finally:
            with self._lock:
                for s in (down, up):
                    if s is not None:
                        self._open.discard(s)
                        s.close()
            self._slots.release()


def _copy(a: socket.socket, b: socket.socket) -> None:
    """Both directions until both ended; each read is at most one buffer, written whole before the next
    read (a side that does not read slows the other down, nothing piles up)."""
    peer = {a: b, b: a}
    open_ = {a, b}
    sel = selectors.DefaultSelector()
    try:
        for s in open_:
            sel.register(s, selectors.EVENT_READ)
        while open_:
            for key, _ in sel.select():
                src = cast(socket.socket, key.fileobj)  # registered above: the two ends
                try:
                    data = src.recv(BUFFER)
                except OSError:
                    data = b""
                if data:
                    try:
                        peer[src].sendall(data)
                        continue
                    except OSError:
                        return
                sel.unregister(src)
                open_.discard(src)
                with contextlib.suppress(OSError):
                    peer[src].shutdown(socket.SHUT_WR)
    finally:
        sel.close()
