"""Inside the sandbox, before the program (healer/netbox.py): bind one listening socket per allowed endpoint
in the sandbox's own network namespace, hand them to healer's relay over the inherited socketpair
(SCM_RIGHTS), close everything and exec the program. Run as `python -I -S netinit.py FD ADDR:PORT,... -- ARGV`.

Deliberately free of imports beyond the standard library's socket/os/json (it runs in every sandboxed
program's start when an allow-list is set). Nothing of it survives the exec: the program inherits neither
the socketpair nor a listening socket, so it holds no channel to the relay.
"""

import json
import os
import socket
import sys


def _fail(chan, why: str) -> None:
    sys.stderr.write(f"healer: sandbox network init: {why}\n")
    try:
        chan.sendmsg([json.dumps({"error": why}).encode()])
    except OSError:
        pass
    os._exit(69)


def main(argv: list[str]) -> None:
    fd, spec, sep, prog = argv[1], argv[2], argv[3], argv[4:]
    chan = socket.socket(fileno=int(fd))
    if sep != "--" or not prog:
        _fail(chan, "usage: netinit.py FD ADDR:PORT,... -- ARGV")
    socks = []
    addrs = [a for a in spec.split(",") if a]
    for a in addrs:
        host, _, port = a.rpartition(":")
        try:
            s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, int(port)))
            s.listen(64)
        except OSError as e:
            _fail(chan, f"cannot listen on {a}: {e}")
        socks.append(s)
    try:
        socket.send_fds(chan, [json.dumps({"listening": addrs}).encode()], [s.fileno() for s in socks])
    except OSError as e:
        _fail(chan, f"cannot hand the sockets to healer: {e}")
    for s in socks:
        s.close()
    chan.close()
    try:
        os.execvp(prog[0], prog)
    except OSError as e:
        sys.stderr.write(f"bwrap: execvp {prog[0]}: {e.strerror}\n")
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv)
