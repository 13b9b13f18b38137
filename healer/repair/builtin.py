"""The built-in repair agent: a deterministic MCP client (no model), for offline use and tests.

It does what a careful operator would do with the same tools, in a fixed order:
read `fleet_status` and `list_findings`, turn the findings the safe tools can fix
into batched calls (`plan`, pure), apply them within the server's call budget
(keeping one call to verify), then read `list_findings` again and report what is
left for a human. It never retries a refused item: a refusal is an answer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from healer import actions as registry
from healer.errors import InvalidInput
from healer.repair import container
from healer.repair.server import MAX_ITEMS


def fixes() -> dict[str, str]:
    """finding kind -> the safe tool that fixes it (everything else is left for a human): the action specs' `tool.fixes`."""
    return {kind: s.name for s in registry.specs() if s.tool is not None for kind in s.tool.fixes}


def order() -> tuple[str, ...]:
    """The tools that fix something, in the order the agent calls them (their specs' `tool.rank`, then the registry's)."""
    tooled = [s for s in registry.specs() if s.tool is not None and s.tool.fixes]
    return tuple(s.name for s in sorted(tooled, key=lambda s: s.tool.rank))  # type: ignore[union-attr]


def _chunks(items: list[str], n: int = MAX_ITEMS) -> list[list[str]]:
    return [items[i:i + n] for i in range(0, len(items), n)]


def plan(findings: list[dict[str, Any]]) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """Findings (as list_findings returns them) -> (ordered tool calls, keys left for a human). Pure."""
    fix, tools = fixes(), order()
    by_tool: dict[str, list[str]] = {t: [] for t in tools}
    labels: dict[str, list[str]] = {}
    left: list[str] = []
    closing = {f["subject"] for f in findings if f.get("kind") == "zombie_ticket"}
    for f in findings:
        kind, subject = f.get("kind"), str(f.get("subject", ""))
        tool = fix.get(kind) if kind is not None else None
        if tool is None or f.get("status", "firing") != "firing":
            left.append(f"{kind}:{subject}")
            continue
        if kind == "stale_label":
            ev = f.get("evidence") or {}
            names = list((ev.get("labels") or {}).keys()) or ([ev["label"]] if ev.get("label") else [])
            if subject in closing:
                continue  # a ticket being closed needs no label work
            for name in names:
                labels.setdefault(name, []).append(subject)
            continue
        if kind == "frozen_in_progress" and subject in closing:
            continue
        if kind == "orphan_worktree" and (f.get("evidence") or {}).get("busy_pids"):
            left.append(f"{kind}:{subject} (busy)")
            continue
        by_tool[tool].append(subject)
    calls: list[tuple[str, dict[str, Any]]] = []
    for tool in tools:
        if tool == "drop_label":
            for name in sorted(labels):
                for chunk in _chunks(sorted(set(labels[name]))):
                    calls.append(("drop_label", {"ticket_ids": chunk, "label": name}))
            continue
        key = registry.tool(tool).subjects  # the tool's list argument, as its action spec says
        for chunk in _chunks(sorted(set(by_tool[tool]))):
            calls.append((tool, {key: chunk}))
    return calls, sorted(set(left))


CallFn = Callable[[str, dict[str, Any]], Awaitable[tuple[dict[str, Any], bool]]]


async def repair(call: CallFn, max_calls: int | None = None) -> dict[str, Any]:
    """Run the strategy over `call(tool, args) -> (payload, is_error)`."""
    log: list[dict[str, Any]] = []

    async def do(tool: str, args: dict[str, Any]) -> dict[str, Any]:
        payload, is_error = await call(tool, args)
        log.append({"tool": tool, "args": args, "is_error": is_error,
                    **{k: payload.get(k) for k in ("done", "refused", "reason") if k in payload}})
        return payload

    status = await do("fleet_status", {})
    budget = status.get("calls_left", 0)
    if max_calls is not None:
        budget = min(budget, max(0, max_calls - 1))
    before = await do("list_findings", {})
    budget -= 1
    calls, left = plan(before.get("findings") or [])
    done = refused = 0
    skipped: list[str] = []
    for i, (tool, args) in enumerate(calls):
        if budget <= 1:  # keep one call to verify
            skipped += [f"{t}({len(next(iter(a.values())))})" for t, a in calls[i:]]
            break
        res = await do(tool, args)
        budget -= 1
        done += int(res.get("done") or 0)
        refused += int(res.get("refused") or 0)
    after = await do("list_findings", {}) if budget >= 1 else {"findings": None}
    found = after.get("findings")
    remaining = None if found is None else len(found)
    return {"agent": "builtin", "findings_before": len(before.get("findings") or []), "findings_after": remaining,
            "planned_calls": len(calls), "done": done, "refused": refused, "left_for_human": left,
            "skipped_for_budget": skipped, "calls": log}


def _payload(result) -> dict[str, Any]:
    if result.structured_content is not None:
        return result.structured_content
    for c in result.content:
        text = getattr(c, "text", None)
        if text:
            try:
                return json.loads(text)
            except ValueError:
                return {"text": text}
    return {}


async def run_session(command: str, args: list[str], env: dict[str, str] | None = None,
                      max_calls: int | None = None) -> dict[str, Any]:
    """Start the server as any MCP host would (stdio) and repair through it."""
    params = StdioServerParameters(command=command, args=list(args), env={**os.environ, **(env or {})})
    # in the docker sandbox the server runs on the host, wired to our own stdin/stdout
    transport = container.inherited_stdio() if container.sandboxed() else stdio_client(params)
    async with transport as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = {t.name for t in (await session.list_tools()).tools}

        async def call(tool: str, a: dict[str, Any]) -> tuple[dict[str, Any], bool]:
            if tool not in listed:
                return {"reason": f"tool {tool} not offered by the server"}, True
            r = await session.call_tool(tool, a)
            return _payload(r), bool(r.is_error)

        return await repair(call, max_calls)


def run_from_config(config: str | Path, *, max_calls: int | None = None) -> dict[str, Any]:
    path = Path(config)
    try:
        cfg = json.loads(path.read_text())
        srv = cfg["mcpServers"]["healer"]
        command, args = srv["command"], list(srv.get("args", []))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InvalidInput(f"{path}: expected an MCP config with mcpServers.healer.command/args, got an unreadable one ({e})") from e
    return anyio.run(run_session, command, args, srv.get("env"), max_calls)
