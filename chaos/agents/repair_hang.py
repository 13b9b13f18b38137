"""A repair agent that never finishes: it must be killed with its whole tree at the deadline.

It starts the MCP server from the generated config (as a host would, and then never
talks to it), a child that escapes with setsid(), and a grandchild from a double
fork; every one of them ignores SIGTERM. It writes all their pids to `--pids`
(one per line) once they are up, then sleeps forever.

    python -m chaos.agents.repair_hang --config mcp.json --pids pids.txt
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path


def _forever() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        signal.pause()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--pids", required=True)
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    cfg = json.loads(Path(a.config).read_text())["mcpServers"]["healer"]
    server = subprocess.Popen([cfg["command"], *cfg["args"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    pids = [os.getpid(), server.pid]
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # escapes the session, then double-forks a grandchild
        os.close(r)
        os.setsid()
        grand = os.fork()
        if grand == 0:
            os.write(w, f"{os.getpid()}\n".encode())
            os.close(w)
            _forever()
        os.write(w, f"{os.getpid()}\n".encode())
        os.close(w)
        _forever()
    os.close(w)
    got = b""
    while got.count(b"\n") < 2:
        chunk = os.read(r, 64)
        if not chunk:
            break
        got += chunk
    pids += [int(x) for x in got.split()]
    tmp = Path(a.pids + ".tmp")
    tmp.write_text("".join(f"{x}\n" for x in pids))
    tmp.replace(a.pids)
    _forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
