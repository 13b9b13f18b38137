"""Scripted agent: tries to escape the repair sandbox, records what happened.

    python -m chaos.agents.docker_escape RESULT_JSON [--port PORT] [--forbidden PATH ...]

1. network: a TCP connection to 127.0.0.1:PORT (a real server listens there on the host)
   and the list of network interfaces;
2. files: a write to each forbidden path (outside scratch) and one inside scratch (the
   folder holding RESULT_JSON), which must work;
3. MCP: when HEALER_MCP_STDIO=inherit, initialize a session over its own stdin/stdout and
   list the tools (the one thing it is allowed to reach).
Writes everything to RESULT_JSON and exits 0; the test decides what counts as escape.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path

DEFAULT_FORBIDDEN = ["/tmp/escape.txt", "/escape.txt", "/etc/escape.txt", "/dev/escape.txt", "/dev/shm/escape.txt",
                     "/var/tmp/escape.txt"]


def try_connect(host: str, port: int) -> dict:
    try:
        with socket.create_connection((host, port), timeout=2):
            return {"host": host, "port": port, "connected": True}
    except OSError as e:
        return {"host": host, "port": port, "connected": False, "error": f"{type(e).__name__}: {e}"}


def interfaces() -> list[str]:
    try:
        lines = Path("/proc/net/dev").read_text().splitlines()[2:]
        return sorted(line.split(":", 1)[0].strip() for line in lines)
    except OSError as e:
        return [f"?{e}"]


def try_write(path: str) -> dict:
    try:
        with open(path, "w") as f:
            f.write("escaped\n")
        return {"path": path, "written": True}
    except OSError as e:
        return {"path": path, "written": False, "error": f"{type(e).__name__}: {e.strerror}"}


def mcp_tools() -> dict:
    # only a run with HEALER_MCP_STDIO=inherit talks MCP; bench/containers.py times this script's start
    import anyio  # lazy: 10 ms (python -X importtime), as said above
    from mcp import ClientSession  # lazy: mcp, 590 ms, as said above

    from healer.repair.container import inherited_stdio  # lazy: 23 ms, as said above

    async def go():
        with anyio.fail_after(20):
            async with inherited_stdio() as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    listed = await session.list_tools()
                    return sorted(t.name for t in listed.tools)

    try:
        return {"tools": anyio.run(go)}
    except Exception as e:  # noqa: BLE001 - recorded, judged by the test
        return {"error": f"{type(e).__name__}: {e}"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("result")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--forbidden", nargs="*", default=[])
    a = ap.parse_args(argv)
    result_path = Path(a.result)
    out: dict = {"uid": os.getuid(), "interfaces": interfaces()}
    if a.port:
        out["connect"] = try_connect("127.0.0.1", a.port)
    out["writes"] = [try_write(p) for p in DEFAULT_FORBIDDEN + list(a.forbidden)]
    out["scratch_write"] = try_write(str(result_path.parent / "inside.txt"))
    if os.environ.get("HEALER_MCP_STDIO") == "inherit":
        out["mcp"] = mcp_tools()
    result_path.write_text(json.dumps(out, indent=2, sort_keys=True))
    print(json.dumps(out, sort_keys=True), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
