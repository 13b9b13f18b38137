"""Inside the sandbox, before the program (healer/netbox.py): bind one listening socket per allowed endpoint
in the sandbox's own network namespace, hand them to healer's relay over the inherited socketpair
(SCM_RIGHTS), close everything and exec the program. Run as `python -I -S netinit.py FD ADDR:PORT,... -- ARGV`.

It runs at the start of every sandboxed program when an allow-list is set, so it imports only what the
interpreter has loaded already or builds in (`_socket`, `posix`): `import socket` and `import json` would
triple its start (measured: 70 ms for the bare interpreter, 160 with socket, 220 with json, on the CI kind of
machine). Nothing of it survives the exec: the program inherits neither the socketpair nor a listening
socket, so it holds no channel to the relay.

Messages (one datagram): `listening ADDR:PORT,...` with the sockets attached, or `error WHY`.
"""

import _socket
import posix
import sys


def _fail(chan, why: str, code: int = 69) -> None:
    sys.stderr.write(f"healer: sandbox network init: {why}\n")
    try:
        chan.sendmsg([f"error {why}".encode()])
    except OSError:
        pass
    posix._exit(code)


def _exec(prog: list[str]) -> None:
    """execvp: a name without a slash is looked up on PATH, as bwrap itself would."""
    name = prog[0]
    dirs = [""] if "/" in name else posix.environ.get(b"PATH", b"/usr/local/bin:/usr/bin:/bin").decode().split(":")
    err: OSError | None = None
    for d in dirs:
        path = f"{d or '.'}/{name}" if d or "/" not in name else name
        try:
            posix.execv(path, prog)
        except OSError as e:
            if err is None or e.errno != 2:  # ENOENT: the next folder; anything else is what the user must see
                err = e
    sys.stderr.write(f"bwrap: execvp {name}: {err.strerror if err else 'No such file or directory'}\n")
    posix._exit(127)


def main(argv: list[str]) -> None:
    fd, spec, sep, prog = argv[1], argv[2], argv[3], argv[4:]
    chan = _socket.socket(fileno=int(fd))
    if sep != "--" or not prog:
        _fail(chan, "usage: netinit.py FD ADDR:PORT,... -- ARGV")
    socks = []
    addrs = [a for a in spec.split(",") if a]
    for a in addrs:
        host, _, port = a.rpartition(":")
        try:
            s = _socket.socket(_socket.AF_INET6 if ":" in host else _socket.AF_INET, _socket.SOCK_STREAM)
            s.bind((host, int(port)))
            s.listen(64)
        except OSError as e:
            _fail(chan, f"cannot listen on {a}: {e.strerror or e}")
        socks.append(s)
    fds = b"".join(s.fileno().to_bytes(4, sys.byteorder) for s in socks)
    try:
        chan.sendmsg([("listening " + ",".join(addrs)).encode()], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
    except OSError as e:
        _fail(chan, f"cannot hand the sockets to healer: {e.strerror or e}")
    for s in socks:
        s.close()
    chan.close()
    _exec(prog)


if __name__ == "__main__":
    main(sys.argv)
