"""A stand-in for the `claude` CLI in headless mode, for proving the repair preset's wiring.

Installed as an executable named `claude` first on PATH, it accepts the flags the
claude preset passes and behaves as Claude Code would with them:

  -p PROMPT                 headless; the prompt is required
  --mcp-config FILE         start every server in FILE's "mcpServers" over stdio
  --strict-mcp-config       use only those servers (required here: nothing else exists)
  --tools ""                no built-in tool at all (Bash, Read, Write...): required here
  --allowedTools A,B        a tool not in this list is denied without reaching the server
  --disallowedTools A,B     denied, whatever else says
  --max-turns N             at most N model turns (one tool call per turn here)
  --output-format json      print one JSON result object

Its "model" is a fixed script: read fleet_status and list_findings, requeue the
frozen tickets and drop stale labels, then try one tool it was not allowed
(which must be denied locally). It prints a Claude-style result object whose
`result` text lists what it did; flags it did not get are errors (exit 2),
like a real CLI rejecting its arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="claude", add_help=False)
    p.add_argument("-p", "--print", dest="prompt", required=True)
    p.add_argument("--mcp-config", required=True)
    p.add_argument("--strict-mcp-config", action="store_true")
    p.add_argument("--allowedTools", "--allowed-tools", dest="allowed", default="")
    p.add_argument("--disallowedTools", "--disallowed-tools", dest="disallowed", default="")
    p.add_argument("--tools", dest="builtin_tools", default=None)
    p.add_argument("--max-turns", type=int, default=None)
    p.add_argument("--output-format", default="text")
    p.add_argument("--model", default=None)
    a = p.parse_args(argv)
    if not a.strict_mcp_config:
        p.error("this stand-in expects --strict-mcp-config (the preset must not let other servers in)")
    if a.builtin_tools != "":
        p.error('this stand-in expects --tools "" (no built-in tool: the MCP server is the only way to act)')
    if a.max_turns is None:
        p.error("this stand-in expects --max-turns")
    return a


async def session(a: argparse.Namespace) -> dict[str, Any]:
    from mcp import ClientSession, StdioServerParameters  # lazy: mcp, 470 ms (-X importtime) on `gameday list` (load_all)
    from mcp.client.stdio import stdio_client  # lazy: mcp, 470 ms, as above

    servers = json.loads(Path(a.mcp_config).read_text())["mcpServers"]
    allowed = {t.strip() for t in a.allowed.split(",") if t.strip()}
    (name, cfg), = servers.items()  # the preset configures exactly one server
    params = StdioServerParameters(command=cfg["command"], args=cfg.get("args", []),
                                   env={**os.environ, **cfg.get("env", {})})
    turns, transcript, denied = 0, [], []
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        offered = sorted(t.name for t in (await s.list_tools()).tools)

        async def use(tool: str, args: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal turns
            if turns >= a.max_turns:
                return None
            turns += 1
            qualified = f"mcp__{name}__{tool}"
            if qualified not in allowed:
                denied.append(qualified)  # Claude Code refuses before the server sees it
                return None
            res = await s.call_tool(tool, args)
            transcript.append({"tool": qualified, "is_error": res.is_error})
            return res.structured_content or {}

        await use("fleet_status", {})
        found = (await use("list_findings", {})) or {}
        frozen = sorted(f["subject"] for f in found.get("findings", []) if f["kind"] == "frozen_in_progress")
        if frozen:
            await use("requeue_ticket", {"ticket_ids": frozen})
        stale: dict[str, list[str]] = {}
        for f in found.get("findings", []):
            if f["kind"] == "stale_label":
                for label in (f.get("evidence") or {}).get("labels", {}):
                    stale.setdefault(label, []).append(f["subject"])
        for label, ids in sorted(stale.items()):
            await use("drop_label", {"ticket_ids": sorted(ids), "label": label})
        # the model tries a built-in tool: with --tools "" it does not exist; Claude Code denies it locally
        turns += 1
        denied.append("Bash")
        if a.builtin_tools or "Bash" not in a.disallowed.split(","):
            raise SystemExit("Bash would have been available to the model")
    return {"server": name, "offered": offered, "allowed": sorted(allowed), "turns": turns,
            "disallowed": sorted(t for t in a.disallowed.split(",") if t),
            "transcript": transcript, "denied": denied, "requeued": frozen}


def main(argv: list[str] | None = None) -> int:
    a = parse(sys.argv[1:] if argv is None else argv)
    out = anyio.run(session, a)
    result = {
        "type": "result", "subtype": "success", "is_error": False, "num_turns": out["turns"],
        "session_id": str(uuid.uuid4()), "total_cost_usd": 0.0, "duration_ms": 0,
        "result": json.dumps(out, sort_keys=True),
    }
    if a.output_format == "json":
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        sys.stdout.write(result["result"] + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
