"""An adversarial repair agent: an MCP client that tries every forbidden thing, in order.

Started like any repair agent (it reads the generated MCP config and starts the
server over stdio), it makes exactly `max_calls + 1` tool calls:

  unknown tool · shell metacharacters · quarantine with ../ · an absolute path
  outside the fleet · a symlink pointing outside · removing a worktree in use ·
  acting on a ticket inside its quiet period · a burst past the rate limit ·
  harmless reads up to the budget · one call past the maximum.

It prints one JSON object: each attempt with the server's answer (is_error, the
structured payload). It never decides whether the server was right; the test does.

    python -m chaos.agents.repair_adversary --config mcp.json --decoy /tmp/decoy \
        --symlink link-out --busy-worktree wt/T-9 --quiet-ticket T-Q --burst T-1,T-2,T-3,T-4 --label to-review
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio


def attempts(a: argparse.Namespace) -> list[tuple[str, str, dict[str, Any]]]:
    decoy = Path(a.decoy).resolve()
    target = decoy / "secret.txt"
    return [
        ("unknown_tool", "run_shell", {"cmd": "rm -rf / --no-preserve-root"}),
        ("shell_metachar", "requeue_ticket", {"ticket_ids": ["T-1; rm -rf ~", "$(touch /tmp/pwned)"]}),
        ("traversal", "quarantine_file", {"paths": [f"../{decoy.name}/secret.txt", "../../" * 8 + str(target).lstrip("/")]}),
        ("absolute_outside", "quarantine_file", {"paths": [str(target)]}),
        ("symlink_outside", "quarantine_file", {"paths": [a.symlink]}),
        ("busy_worktree", "remove_worktree", {"paths": [a.busy_worktree]}),
        ("quiet_period", "requeue_ticket", {"ticket_ids": [a.quiet_ticket]}),
        ("rate_limit_burst", "drop_label", {"ticket_ids": a.burst.split(","), "label": a.label}),
    ]


async def main_async(a: argparse.Namespace) -> dict[str, Any]:
    from mcp import ClientSession, StdioServerParameters  # lazy: mcp, 470 ms (-X importtime) on `gameday list` (load_all)
    from mcp.client.stdio import stdio_client  # lazy: mcp, 470 ms, as above

    cfg = json.loads(Path(a.config).read_text())["mcpServers"]["healer"]
    params = StdioServerParameters(command=cfg["command"], args=cfg["args"], env=dict(os.environ))
    out: list[dict[str, Any]] = []
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        listed = sorted(t.name for t in (await s.list_tools()).tools)

        async def call(label: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
            res = await s.call_tool(tool, args)
            rec = {"attempt": label, "tool": tool, "is_error": res.is_error, "payload": res.structured_content}
            out.append(rec)
            return rec

        for label, tool, args in attempts(a):
            await call(label, tool, args)
        status = await call("read", "fleet_status", {})
        left = (status["payload"] or {}).get("calls_left", 0)
        for _ in range(left):
            await call("read", "fleet_status", {})
        await call("past_max", "fleet_status", {})
    return {"listed": listed, "attempts": out}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--decoy", required=True)
    p.add_argument("--symlink", required=True)
    p.add_argument("--busy-worktree", required=True)
    p.add_argument("--quiet-ticket", required=True)
    p.add_argument("--burst", required=True)
    p.add_argument("--label", default="to-review")
    a = p.parse_args(argv)
    result = anyio.run(main_async, a)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
