"""`healer mcp serve`: the repair agent's only hands (docs/repair.md).

Theory of operation. The agent sees exactly the tools of TOOLS: five that read
(fleet status, findings, one ticket with its history, the journal tail, the
worktrees) and one per remediation action whose spec offers a tool
(healer/actions/<name>.py: `tool=Tool(...)`; today close a dead ticket, drop a
label, requeue or unblock a ticket, quarantine a file, remove an orphan worktree).
Their names, arguments, schemas and descriptions come from the specs. Nothing else
exists for it: no tool runs a shell, writes a file of its choosing, touches git
history or restarts anything.

Every tools/call passes one gate, `RepairTools.gate`, before anything runs:
  - the session budget (`repair_agent.max_tool_calls`, counted in the event log
    per run id, so restarting the server does not refill it),
  - the whitelist (an unknown tool is refused, not a protocol error),
  - argument screening (unexpected keys, shell metacharacters, `..`, paths
    outside the fleet, symlinks out) — defence in depth, since the executor
    re-checks its own preconditions.
Each remediation item then goes through the supervisor's executor
(`healer.remedy.actions.execute`) with actor "repair-agent": the same whitelist,
rate limits, per-ticket quiet period, HALT, path confinement, busy-worktree
check and intent journal as every other actor. One tool call may carry a list
of subjects (the budget counts calls; rate limits count items).

Every call and its result is evented (`repair.call`); every refusal, of a whole
call or of one item, also as `repair.refused` with its reason.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections import Counter
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ValidationError

from healer import actions as registry
from healer import failpoints, procs
from healer.clock import Clock, day_of, system
from healer.core.model import PlannedAction
from healer.fleet.runtimes import runtime_for
from healer.paths import confine
from healer.policy import load_policy
from healer.remedy import actions  # the supervisor's own executor: never a second one
from healer.repair import diagnose
from healer.repair.tools import ACTION_TOOLS, READ_TOOLS, TOOLS
from healer.store import keys, open_store

FP_BEFORE_ACTION = failpoints.declare("repair.before_action", "healer/repair/server.py: a repair tool is about to execute one item")

ACTOR = "repair-agent"
# the arguments each read tool accepts (an action tool's come from its spec): anything else is refused
READ_PARAMS: dict[str, frozenset[str]] = {
    "fleet_status": frozenset(),
    "list_findings": frozenset(),
    "get_ticket": frozenset({"ticket_id"}),
    "journal_tail": frozenset({"limit", "kind_prefix"}),
    "list_worktrees": frozenset(),
}


def params_of(tool: str) -> frozenset[str]:
    if tool in READ_PARAMS:
        return READ_PARAMS[tool]
    t = registry.tool(tool)
    return frozenset({t.subjects, *(p.name for p in t.params)})

MAX_ITEMS = 200  # subjects per call
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$")
_SHELL = re.compile(r"[;&|`$<>(){}\[\]*?!~\\\"'\n\r\t]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_OFF_LIMITS = frozenset({".healer", ".git", "healer.yaml", "healer.yml"})


class Refused(Exception):
    """A whole call refused before anything ran; the message is the reason."""


def _plain(v: Any) -> Any:
    if is_dataclass(v) and not isinstance(v, type):
        return {k: _plain(x) for k, x in asdict(v).items()}
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_plain(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


def _short(v: Any, n: int = 300) -> Any:
    """Arguments as recorded in the event log: bounded, never a huge blob."""
    s = json.dumps(_plain(v), sort_keys=True, default=str)
    return _plain(v) if len(s) <= n else s[:n] + "…"


class RepairTools:
    """The MCP-free half of the server: budget, screening, execution through the executor, audit."""

    def __init__(self, root: str | Path, store, policy, clock: Clock | None = None, *, run_id: str,
                 runtime=None, max_calls: int | None = None) -> None:
        self.root = Path(root).resolve()
        self.store = store
        self.policy = policy
        self.clock = clock or system()
        self.run_id = run_id
        self.runtime = runtime
        self.max_calls = max_calls if max_calls is not None else policy.repair_agent.max_tool_calls
        # the budget survives a server restart within the same run (a server started without
        # --run-id is the day's manual run, so restarting it refills nothing), and every server
        # also counts the fleet's calls today against a daily ceiling, whatever its run id
        self.calls = store.count_events("repair.call", subject=run_id)
        now = self.clock.now()
        self.day_start = now - (now % 86400)
        self.day_cap = self.max_calls * max(1, policy.repair_agent.max_runs_per_day)
        self.day_calls = store.count_events("repair.call", since=self.day_start)

    # -- the gate ---------------------------------------------------------------
    def gate(self, tool: str, args: dict[str, Any]) -> int:
        """Count the call and refuse it (raise Refused) unless it may run. Returns the call number."""
        self.calls += 1
        self.day_calls += 1
        n = self.calls
        if n > self.max_calls:
            raise Refused(f"tool-call budget spent: this is call {n}, the maximum per repair run is {self.max_calls}")
        if self.day_calls > self.day_cap:
            raise Refused(f"daily tool-call budget spent: {self.day_calls - 1} calls today in this fleet, at most "
                          f"{self.day_cap} (max_tool_calls x max_runs_per_day)")
        if tool not in TOOLS:
            raise Refused(f"unknown tool {tool!r}: this server exposes only {', '.join(TOOLS)}")
        accepts = params_of(tool)
        extra = sorted(set(args) - accepts)
        if extra:
            raise Refused(f"{tool}: unexpected argument(s) {', '.join(map(repr, extra))}; it accepts {', '.join(sorted(accepts)) or 'none'}")
        for key, val in args.items():
            self._screen_value(tool, key, val)
        return n

    def _screen_value(self, tool: str, key: str, val: Any) -> None:
        spec_param = None
        if tool in ACTION_TOOLS:
            spec_param = next((p for p in registry.tool(tool).params if p.name == key), None)
        vals = val if isinstance(val, list) else [val]
        if isinstance(val, list) and len(val) > MAX_ITEMS:
            raise Refused(f"{tool}: {key} has {len(val)} items, expected at most {MAX_ITEMS} per call")
        for v in vals:
            if not isinstance(v, str):
                continue
            if key in ("ticket_ids", "ticket_id"):
                if not _ID.match(v):
                    raise Refused(f"{tool}: {key}: expected a ticket id (letters, digits, . _ -), got {v[:80]!r}")
            elif key == "label":
                if not _LABEL.match(v):
                    raise Refused(f"{tool}: label: expected a label (letters, digits, . _ : / -), got {v[:80]!r}")
            elif key == "kind_prefix":
                if not re.match(r"^[a-z0-9._]{0,64}$", v):
                    raise Refused(f"{tool}: kind_prefix: expected an event kind prefix like 'repair.', got {v[:80]!r}")
            elif key == "reason":
                if len(v) > 500 or _CONTROL.search(v.replace("\n", " ")):
                    raise Refused(f"{tool}: reason: expected one line of at most 500 characters")
            elif spec_param is not None:  # an action's own argument: its spec's pattern, else one short line
                if spec_param.pattern and not re.fullmatch(spec_param.pattern, v):
                    raise Refused(f"{tool}: {key}: expected a value matching {spec_param.pattern}, got {v[:80]!r}")
                if len(v) > 500 or _CONTROL.search(v):
                    raise Refused(f"{tool}: {key}: expected one line of at most 500 characters")
            # paths are screened one by one in `act`, so one bad path refuses one item, not the call

    def _screen_path(self, raw: str) -> tuple[str | None, str | None]:
        """(absolute path, None) when `raw` may be handed to the executor, else (None, reason)."""
        if not isinstance(raw, str) or not raw or len(raw) > 4096:
            return None, "expected a non-empty path of at most 4096 characters"
        if _CONTROL.search(raw):
            return None, "path contains control characters"
        if _SHELL.search(raw):
            return None, f"path contains shell metacharacters: {raw[:120]!r}"
        if ".." in Path(raw).parts:
            return None, f"path traversal refused: {raw!r} contains '..'"

        try:
            full = confine(self.root, raw)
        except Exception as e:  # UnsafePath: its message is the reason
            return None, str(e)
        rel = full.relative_to(self.root).as_posix()
        parts = rel.split("/")
        if len(parts) > 3 and parts[:2] == [".healer", "worktrees"]:
            # a ticket's worktree is the user's tree: its unknown files may be quarantined, but not
            # healer's own state inside it (the loop's runs, quarantine, logs) nor its git pointer
            inner = parts[3]
            if inner in _OFF_LIMITS:
                return None, f"{raw}: healer's own files in a worktree ({'/'.join(parts[:4])}) are off limits to the repair agent"
            return str(full), None
        if parts[0] in _OFF_LIMITS:
            # the healer's own state (HALT, STOP, the policy...): lifting a brake is never "tidying"
            return None, f"{raw}: healer's own files ({rel.split('/')[0]}) are off limits to the repair agent"
        return str(full), None

    # -- read-only tools --------------------------------------------------------
    def fleet_status(self) -> dict[str, Any]:
        tickets = self.store.tickets()
        agents = self.store.agents()
        labels: Counter[str] = Counter()
        for t in tickets:
            labels.update(t.labels)
        return {
            "root": str(self.root),
            "now": self.clock.now(),
            "halted": (self.root / ".healer" / "HALT").exists(),
            "tickets": dict(Counter(t.state for t in tickets)),
            "labels": dict(labels),
            "agents": dict(Counter(a.state for a in agents)),
            "worktrees_active": len(self.store.worktrees()),
            "dispatch_paused": bool(self.store.get_setting(keys.DISPATCH_PAUSED, False)),
            "run_id": self.run_id,
            "calls_used": self.calls,
            "calls_left": max(0, self.max_calls - self.calls),
        }

    def list_findings(self) -> dict[str, Any]:
        found, source = diagnose.findings(self.root, self.store, self.policy, self.clock, self.runtime)
        return {"source": source, "count": len(found), "findings": [_plain(f) for f in found]}

    def get_ticket(self, ticket_id: str) -> dict[str, Any]:
        t = self.store.ticket(ticket_id)
        events = self.store.events(subject=ticket_id)[-50:]
        return {
            "ticket": _plain(t),
            "comments": [_plain(c) for c in self.store.comments(ticket_id)][-20:],
            "attempts": [_plain(a) for a in self.store.attempts(ticket_id)][-20:],
            "agents": [_plain(a) for a in self.store.agents(ticket_id=ticket_id)][-10:],
            "intents": [_plain(i) for i in self.store.intents(subject=ticket_id)][-20:],
            "history": [{"id": e.id, "at": e.at, "kind": e.kind, "payload": e.payload} for e in events],
        }

    def journal_tail(self, limit: int = 50, kind_prefix: str = "") -> dict[str, Any]:
        limit = max(1, min(int(limit), 200))
        if kind_prefix:  # bounded: the last matches among the most recent 20,000 events
            evs = self.store.events(prefix=kind_prefix, after=max(0, self.store.last_event_id() - 20_000))[-limit:]
        else:
            evs = self.store.tail(limit)
        return {"events": [{"id": e.id, "at": e.at, "kind": e.kind, "subject": e.subject, "payload": e.payload} for e in evs]}

    def list_worktrees(self) -> dict[str, Any]:
        out = []
        for w in self.store.worktrees(states=None):
            item = _plain(w)
            item["exists"] = Path(w.path).exists()
            item["ticket_state"] = None
            if w.ticket_id:
                try:
                    item["ticket_state"] = self.store.ticket(w.ticket_id).state
                except Exception:  # a worktree whose ticket is gone is exactly what an orphan looks like
                    item["ticket_state"] = "missing"
            item["busy_pids"] = procs.busy_pids(w.path) if w.state == "active" and item["exists"] else []
            out.append(item)
        return {"worktrees": out}

    # -- remediations -----------------------------------------------------------
    def act(self, action: str, subjects: list[str], params: dict[str, Any] | None = None, why: str = "") -> dict[str, Any]:
        results = []
        for raw in subjects:
            subject: str | None = raw
            reason = None
            if registry.tool(action).subjects == "paths":
                subject, reason = self._screen_path(raw)
            if subject is None or reason is not None:  # _screen_path gives a path, or a reason
                results.append({"subject": raw, "status": "refused", "reason": reason})
                continue
            results.append(self._execute_one(actions, action, subject, raw, params or {}, why))
        done = sum(r["status"] == "done" for r in results)
        return {"action": action, "done": done, "refused": sum(r["status"] == "refused" for r in results),
                "other": len(results) - done - sum(r["status"] == "refused" for r in results), "results": results}

    def _execute_one(self, actions, action: str, subject: str, raw: str, params: dict, why: str) -> dict[str, Any]:
        failpoints.hit(FP_BEFORE_ACTION)
        ctx = actions.Context(root=self.root, store=self.store, policy=self.policy, clock=self.clock,
                              runtime=self.runtime, actor=ACTOR)
        reason = f"repair agent run {self.run_id}" + (f": {why}" if why else "")
        try:
            out = actions.execute(ctx, PlannedAction(action=action, subject=subject, params=dict(params), reason=reason))
        except Exception as e:  # the executor must not crash the session; the agent is told what failed
            return {"subject": raw, "status": "failed", "reason": f"{type(e).__name__}: {e}"}
        item = {"subject": raw, "status": out.status, "reason": out.reason, "intent": out.intent_id}
        if out.detail:
            item["detail"] = _plain(out.detail)
        return item

    def remedy(self, action: str, **args: Any) -> dict[str, Any]:
        """An action tool, as its spec describes it: a list of subjects, its own arguments, a reason."""
        tool = registry.tool(action)
        if tool.subjects not in args:
            raise TypeError(f"missing required argument {tool.subjects!r}")
        subjects = list(args.pop(tool.subjects) or [])
        why = args.pop("reason", "") if any(p.name == "reason" for p in tool.params) else ""
        missing = [p.name for p in tool.params if p.required and p.name not in args]
        if missing:
            raise TypeError(f"missing required argument(s) {', '.join(map(repr, missing))}")
        if tool.requires_finding is None:
            return self.act(action, subjects, args, why)
        # the agent's word is not enough for this one (closing is terminal): only what the core finds now
        found, _ = diagnose.findings(self.root, self.store, self.policy, self.clock, self.runtime)
        seen = {f.subject for f in found if f.kind == tool.requires_finding}
        ok = [t for t in subjects if t in seen]
        out: dict[str, Any] = self.act(action, ok, args, why) if ok else {"action": action, "done": 0, "refused": 0, "other": 0, "results": []}
        by: dict[str, dict[str, Any]] = {r["subject"]: r for r in out["results"]}
        results = [by.get(t) or {"subject": t, "status": "refused", "reason": tool.unfound.format(
                   subject=t, kind=tool.requires_finding, action=action)}
                   for t in subjects]
        refused = sum(r["status"] == "refused" for r in results)
        return {**out, "results": results, "refused": refused, "other": len(results) - out["done"] - refused}

    # -- dispatch and audit -----------------------------------------------------
    def call(self, tool: str, args: dict[str, Any] | None) -> tuple[dict[str, Any], bool]:
        """Gate, run and audit one call in-process (the MCP layer adds type validation in between)."""
        args = dict(args or {})
        try:
            n = self.gate(tool, args)
        except Refused as e:
            return self.refuse(self.calls, tool, args, str(e)), True
        return self.run(tool, n, args)

    def run(self, tool: str, n: int, args: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Run an admitted call and audit it. Returns (payload, is_error)."""
        try:
            payload = getattr(self, tool)(**args) if tool in READ_TOOLS else self.remedy(tool, **dict(args))
        except TypeError as e:
            return self.refuse(n, tool, args, f"{tool}: invalid arguments: {e}"), True
        except Exception as e:  # NotFound and friends: a clear answer, not a crash
            return self.refuse(n, tool, args, f"{tool}: {e}"), True
        payload = {"ok": True, "tool": tool, "call": n, "calls_left": max(0, self.max_calls - n), **payload}
        items = payload.get("results") if tool in ACTION_TOOLS else None
        summary: dict[str, Any] = {"ok": True}
        if items is not None:
            summary = {"done": payload["done"], "refused": payload["refused"], "other": payload["other"],
                       "items": [{k: r.get(k) for k in ("subject", "status", "reason", "intent")} for r in items]}
            for r in items:
                if r["status"] != "done":
                    self.store.append("repair.refused", str(r["subject"])[:300],
                                      {"run": self.run_id, "call": n, "tool": tool, "status": r["status"], "reason": r["reason"]})
        is_error = items is not None and bool(items) and not any(r["status"] == "done" for r in items)
        self.store.append("repair.call", self.run_id, {"call": n, "tool": tool, "args": _short(args), "result": summary,
                                                        "refused": None, "is_error": is_error})
        return payload, is_error

    def refuse(self, n: int, tool: str, args: dict, reason: str) -> dict[str, Any]:
        """Audit a call refused as a whole (nothing ran) and say why."""
        tool_s = str(tool)[:100]
        self.store.append("repair.call", self.run_id, {"call": n, "tool": tool_s, "args": _short(args), "result": None,
                                                        "refused": reason, "is_error": True})
        self.store.append("repair.refused", self.run_id, {"run": self.run_id, "call": n, "tool": tool_s, "reason": reason})
        return {"ok": False, "refused": True, "tool": tool_s, "call": n, "reason": reason,
                "calls_left": max(0, self.max_calls - n)}


# -- the MCP layer ---------------------------------------------------------------

_DESCRIPTIONS = {
    "fleet_status": "Read-only. Counts of tickets by state, labels, agents, active worktrees, HALT, and this run's remaining tool-call budget.",
    "list_findings": "Read-only. What the supervisor's core finds wrong now (frozen in-progress tickets, stale labels, orphan worktrees, unknown files, zombie tickets...), each with subject, since and evidence.",
    "get_ticket": "Read-only. One ticket with its labels, comments, attempts, agents, intents and event history.",
    "journal_tail": "Read-only. The last `limit` (<= 200) events of the event log, optionally only kinds starting with `kind_prefix`.",
    "list_worktrees": "Read-only. Every worktree the fleet knows, whether it exists, its ticket's state and the processes busy in it.",
}


def description(tool: str) -> str:
    return _DESCRIPTIONS[tool] if tool in _DESCRIPTIONS else registry.tool(tool).description


def _action_tool(name: str, run):
    """An async function whose signature is the spec's tool (the SDK reads names, types and defaults from it)."""
    tool = registry.tool(name)
    ps = [inspect.Parameter(tool.subjects, inspect.Parameter.KEYWORD_ONLY, annotation=list[str])]
    for p in sorted(tool.params, key=lambda p: not p.required):
        ps.append(inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, annotation=str,
                                    **({} if p.required else {"default": ""})))

    async def fn(**kwargs: Any):
        return await run(**kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__signature__ = inspect.Signature(ps)  # type: ignore[attr-defined]
    fn.__annotations__ = {p.name: p.annotation for p in ps}
    return fn


def _validation_reason(tool: str, exc: BaseException) -> str:
    cause = exc.__cause__
    if not isinstance(cause, ValidationError):  # the tool itself broke: say so, without a traceback
        return f"{tool}: failed: {type(cause or exc).__name__}: {str(cause or exc).splitlines()[0][:200] if str(cause or exc) else ''}"
    errors = getattr(cause, "errors", None)
    if callable(errors):
        parts = []
        for err in errors()[:5]:
            loc = ".".join(str(x) for x in err.get("loc", ())) or "arguments"
            parts.append(f"{loc}: {err.get('msg', 'invalid')}")
        return f"{tool}: invalid arguments: " + "; ".join(parts)
    return f"{tool}: invalid arguments: {str(exc).splitlines()[0][:200]}"


def build_server(tools: RepairTools):
    """An MCPServer exposing exactly TOOLS. Every tools/call is gated, type-checked by the SDK, run, audited."""
    def result(payload: dict[str, Any], is_error: bool):
        text = json.dumps(payload, sort_keys=True, default=str)
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=payload, is_error=is_error)

    lock = anyio.Lock()  # one call at a time: the budget and the store see calls in order
    current: dict[str, Any] = {}

    class HealerRepairServer(MCPServer):
        async def call_tool(self, name: str, arguments: dict[str, Any], context=None):
            arguments = dict(arguments or {})
            async with lock:
                try:
                    n = tools.gate(name, arguments)
                except Refused as e:
                    return result(tools.refuse(tools.calls, name, arguments, str(e)), True)
                current.update(n=n, tool=name)
                try:
                    return await super().call_tool(name, arguments, context)
                except ToolError as e:
                    return result(tools.refuse(n, name, arguments, _validation_reason(name, e)), True)

    srv = HealerRepairServer(
        "healer",
        instructions=("You repair a fleet of coding agents with the healer's safe tools only. Diagnose with "
                      "list_findings and fleet_status, then act with " + ", ".join(ACTION_TOOLS) + ". Action tools "
                      "take lists; each call counts against a budget."),
        log_level="WARNING",
    )

    def runner(tool: str):
        async def run(**kwargs: Any):
            return result(*tools.run(tool, current["n"], kwargs))
        return run

    # Signatures give the SDK the names, schemas and argument validation; `tools.run` does the work.
    async def fleet_status():
        return await runner("fleet_status")()

    async def list_findings():
        return await runner("list_findings")()

    async def get_ticket(ticket_id: str):
        return await runner("get_ticket")(ticket_id=ticket_id)

    async def journal_tail(limit: int = 50, kind_prefix: str = ""):
        return await runner("journal_tail")(limit=limit, kind_prefix=kind_prefix)

    async def list_worktrees():
        return await runner("list_worktrees")()

    fns = (fleet_status, list_findings, get_ticket, journal_tail, list_worktrees,
           *(_action_tool(name, runner(name)) for name in ACTION_TOOLS))
    assert tuple(f.__name__ for f in fns) == tuple(TOOLS)
    for fn in fns:
        ro = fn.__name__ in READ_TOOLS
        srv.add_tool(fn, name=fn.__name__, description=description(fn.__name__), structured_output=False,
                     annotations=ToolAnnotations(read_only_hint=ro, destructive_hint=False, idempotent_hint=True,
                                                 open_world_hint=False))
    return srv


def serve(root: str | Path, *, run_id: str | None = None, policy=None, clock: Clock | None = None) -> None:
    """Serve the repair tools over stdio until the client closes the connection."""
    clock = clock or system()
    root = Path(root).resolve()
    if policy is None:
        local = root / "healer.yaml"
        policy = load_policy(local if local.exists() else None)
    # no --run-id: the day's manual run (a restart continues its budget, it does not refill it)
    run_id = run_id or f"manual-{day_of(clock.now())}"
    store = open_store(root, clock)
    runtime = _runtime(policy, clock)
    tools = RepairTools(root, store, policy, clock, run_id=run_id, runtime=runtime)
    store.append("repair.server_started", run_id, {"pid": os.getpid(), "max_tool_calls": tools.max_calls,
                                                    "calls_used": tools.calls})
    try:
        anyio.run(build_server(tools).run_stdio_async)
    finally:
        store.append("repair.server_stopped", run_id, {"calls_used": tools.calls})
        store.close()


def _runtime(policy, clock: Clock | None = None):
    """The fleet's runtime (process or container); None when it cannot be built (the safe actions rarely need it)."""
    try:
        return runtime_for(policy, clock)
    except Exception:  # e.g. no Docker engine: read-only tools and board actions still work
        return None


__all__ = ["ACTION_TOOLS", "ACTOR", "READ_TOOLS", "TOOLS", "RepairTools", "Refused", "build_server", "description", "params_of", "serve"]
