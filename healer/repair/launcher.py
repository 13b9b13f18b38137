"""Launch the repair agent: confined, timed, audited (docs/repair.md).

A run gets an id, a scratch folder `ROOT/.healer/repair/<run-id>/` holding the
generated MCP config and the agent's output, and an EMPTY working directory
(`<run-id>/cwd/`) so an agent that looks around sees nothing to touch. The agent
runs in its own session under a hard deadline (`repair_agent.timeout`) that
kills its whole tree, including the MCP server it started. Its only tools are
those of `healer mcp serve`, which enforces the call budget server-side and
audits every call. At the end, each ticket it touched gets a summary comment.

Presets (policy `repair_agent.agent.preset`, or `--agent`):
  builtin  the deterministic MCP client in healer/repair/builtin.py (the default)
  claude   claude -p PROMPT --mcp-config CFG --strict-mcp-config --tools "" --allowedTools mcp__healer__<tool>,...
           --disallowedTools Bash,Edit,... --max-turns N --output-format json
  codex    codex exec with `-c mcp_servers.healer.*` overrides (command, args, enabled_tools),
           read-only sandbox, run in the scratch cwd
  command  the policy's argv; placeholders {mcp_config} {prompt} {prompt_file} {run_id} {scratch} {tools}
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from healer import actions as registry
from healer import failpoints, procs
from healer.clock import Clock, iso, stamp, system
from healer.errors import UsageError
from healer.repair import container
from healer.repair.tools import TOOLS

FP_AFTER_START = failpoints.declare("repair.after_start", "healer/repair/launcher.py: run recorded, agent not yet started")

PROMPT = """You are the healer's repair agent, the last resort for a fleet of autonomous coding agents that is stuck.
You can act ONLY through the MCP tools of the server named "healer"; you have no shell and no file access.
1. Call fleet_status and list_findings to see what is blocked (get_ticket, journal_tail, list_worktrees for detail).
2. Fix only what the findings show, with the safe tools: {safe_tools}. Action tools take LISTS of subjects: batch them.
3. You have at most {max_calls} tool calls in total. A refusal comes with its reason: do not retry a refused item.
4. Finish with a short summary of what you did and what you left for a human.
Why you were launched: {reason}
"""


def safe_tools() -> str:
    """The prompt's list of action tools, each with its spec's `tool.hint` (an action registered later is named too)."""
    return "; ".join(f"{s.name} for {s.tool.hint}" if s.tool.hint else s.name
                     for s in registry.specs() if s.tool is not None)


@dataclass
class RunResult:
    run_id: str
    agent: str
    argv: list[str]
    scratch: str
    exit_code: int | None
    timed_out: bool
    killed: list[int]
    elapsed: float
    calls: int = 0
    done: int = 0
    refused: int = 0
    touched: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def new_run_id(clock: Clock) -> str:
    return f"R{stamp(clock.now())[:15]}-{uuid.uuid4().hex[:6]}"


def runs(store) -> list[float]:
    """When each repair run started (the daily cap counts these by UTC day)."""
    return [e.at for e in store.events(kinds=["repair.started"])]


def server_argv(root: Path, run_id: str, python: str | None = None) -> tuple[str, list[str]]:
    return python or sys.executable, ["-m", "healer", "mcp", "serve", "--root", str(root), "--run-id", run_id]


def write_config(scratch: Path, root: Path, run_id: str) -> Path:
    cmd, args = server_argv(root, run_id)
    cfg = scratch / "mcp.json"
    cfg.write_text(json.dumps({"mcpServers": {"healer": {"command": cmd, "args": args}}}, indent=2) + "\n")
    return cfg


CLAUDE_BUILTINS = ("Bash", "Edit", "MultiEdit", "Write", "NotebookEdit", "Read", "Glob", "Grep", "WebFetch", "WebSearch",
                   "Task", "Agent", "Skill")


def _toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid TOML basic string


def agent_argv(preset: str, policy, *, cfg: Path, root: Path, run_id: str, scratch: Path, prompt: str) -> list[str]:
    ra = policy.repair_agent
    if preset == "builtin":
        return [sys.executable, "-m", "healer", "repair", "builtin-agent", "--config", str(cfg)]
    if preset == "claude":
        allowed = ",".join(f"mcp__healer__{t}" for t in TOOLS)
        # --allowedTools only pre-approves (it is additive); `--tools ""` is what removes the built-in tools
        # (Bash, Read, Write...), and --disallowedTools names them again for CLIs that predate --tools.
        return ["claude", "-p", prompt, "--mcp-config", str(cfg), "--strict-mcp-config", "--tools", "",
                "--allowedTools", allowed, "--disallowedTools", ",".join(CLAUDE_BUILTINS),
                "--max-turns", str(ra.agent.max_turns), "--output-format", "json"]
    if preset == "codex":
        cmd, args = server_argv(root, run_id)
        return ["codex", "exec", "--skip-git-repo-check", "--sandbox", "read-only", "--ephemeral",
                "-C", str(scratch / "cwd"),
                "-c", f"mcp_servers.healer.command={_toml_str(cmd)}",
                "-c", "mcp_servers.healer.args=[" + ",".join(_toml_str(a) for a in args) + "]",
                "-c", "mcp_servers.healer.enabled_tools=[" + ",".join(_toml_str(t) for t in TOOLS) + "]",
                prompt]
    if preset == "command":
        if not ra.agent.command:
            raise UsageError("repair_agent.agent: preset 'command' expects a 'command' argv, got none")
        prompt_file = scratch / "prompt.md"
        subst = {"mcp_config": str(cfg), "prompt": prompt, "prompt_file": str(prompt_file), "run_id": run_id,
                 "scratch": str(scratch), "tools": ",".join(TOOLS)}
        return [a.format_map(_Missing(subst)) for a in ra.agent.command]
    raise UsageError(f"repair agent: expected a preset among builtin, claude, codex, command, got {preset!r}")


class _Missing(dict):
    def __missing__(self, key: str) -> str:  # an unknown {placeholder} stays literal
        return "{" + key + "}"


def launch(root: str | Path, policy, store, clock: Clock | None = None, *, agent: str | None = None,
           reason: str = "", blockages: list[str] | None = None, env: dict[str, str] | None = None) -> RunResult:
    """Run one repair agent to completion or to its deadline; record everything."""
    clock = clock or system()
    root = Path(root).resolve()
    ra = policy.repair_agent
    preset = agent or ra.agent.preset
    run_id = new_run_id(clock)
    scratch = root / ".healer" / "repair" / run_id
    cwd = scratch / "cwd"
    cwd.mkdir(parents=True)
    cfg = write_config(scratch, root, run_id)
    prompt = PROMPT.format(safe_tools=safe_tools(), max_calls=ra.max_tool_calls, reason=reason or "blockage persisted past every ceiling")
    (scratch / "prompt.md").write_text(prompt)
    argv = agent_argv(preset, policy, cfg=cfg, root=root, run_id=run_id, scratch=scratch, prompt=prompt)
    if ra.agent.sandbox != "docker" and not _runnable(argv[0], cwd, env):
        # refused before `repair.started`: the daily cap counts agents that ran, not a typo or a missing binary
        store.append("repair.not_started", run_id, {"agent": preset, "program": argv[0], "reason": reason})
        raise UsageError(f"repair agent {preset!r}: cannot run {argv[0]!r}: not found on PATH")
    store.append("repair.started", run_id, {"agent": preset, "argv": _redact(argv, prompt), "reason": reason,
                                            "blockages": list(blockages or [])[:50], "scratch": str(scratch),
                                            "timeout": ra.timeout, "max_tool_calls": ra.max_tool_calls})
    failpoints.hit(FP_AFTER_START)
    grace = min(policy.loop.kill_grace, 5.0)
    try:
        with (scratch / "agent.out").open("wb") as out, (scratch / "agent.err").open("wb") as err:
            if ra.agent.sandbox == "docker":  # healer/repair/container.py: no network, read-only root, MCP over stdio
                cmd, args = server_argv(root, run_id)
                done = container.run(argv, scratch=cwd, readonly=[scratch], timeout=ra.timeout, grace=grace, clock=clock,
                                   env=env, server_argv=[cmd, *args], server_cwd=cwd, stdout=out, stderr=err,
                                   server_stderr=err, image=policy.fleet.image,
                                   labels={"healer.fleet": str(root), "healer.run": run_id})
            else:
                done = procs.run(argv, cwd=cwd, timeout=ra.timeout, grace=grace, clock=clock, env=env, stdout=out, stderr=err)
    except FileNotFoundError as e:
        store.append("repair.ended", run_id, {"exit_code": None, "timed_out": False, "error": f"agent not found: {e}"})
        raise UsageError(f"repair agent {preset!r}: cannot run {argv[0]!r}: not found on PATH") from e
    res = RunResult(run_id, preset, _redact(argv, prompt), str(scratch), done.exit_code, done.timed_out, done.killed,
                    done.elapsed)
    _tally(store, res)
    _comment(store, res, clock)
    store.append("repair.ended", run_id, {"exit_code": res.exit_code, "timed_out": res.timed_out, "killed": len(res.killed),
                                          "elapsed": round(res.elapsed, 3), "calls": res.calls, "done": res.done,
                                          "refused": res.refused, "touched": res.touched})
    return res


def _runnable(program: str, cwd: Path, env: dict[str, str] | None) -> bool:
    """Whether exec would find `program` as the agent is started (its PATH, its cwd)."""
    if os.sep in program:
        p = Path(program) if os.path.isabs(program) else cwd / program
        return p.is_file() and os.access(p, os.X_OK)
    if program in ("python", "python3"):
        return True  # procs.resolve_python runs healer's own interpreter for it
    return shutil.which(program, path=os.pathsep.join(os.get_exec_path(env))) is not None


def _redact(argv: list[str], prompt: str) -> list[str]:
    return ["<prompt>" if a == prompt else a for a in argv]


def _tally(store, res: RunResult) -> None:
    touched: dict[str, None] = {}
    for e in store.events(kinds=["repair.call"], subject=res.run_id):
        res.calls += 1
        result = e.payload.get("result") or {}
        if e.payload.get("refused"):
            res.refused += 1
        for item in result.get("items") or []:
            if item.get("status") == "done":
                res.done += 1
                subj = str(item.get("subject"))
                if _ticket_like(store, subj):
                    touched[subj] = None
            elif item.get("status") == "refused":
                res.refused += 1
    res.touched = list(touched)


def _ticket_like(store, subject: str) -> bool:
    try:
        store.ticket(subject)
        return True
    except Exception:
        return False


def _comment(store, res: RunResult, clock: Clock) -> None:
    """One summary comment per ticket touched, listing what the run did to it."""
    per: dict[str, list[str]] = {}
    for e in store.events(kinds=["repair.call"], subject=res.run_id):
        for item in (e.payload.get("result") or {}).get("items") or []:
            subj = str(item.get("subject"))
            if subj in res.touched:
                per.setdefault(subj, []).append(f"{e.payload.get('tool')}: {item.get('status')}"
                                                + (f" ({item.get('reason')})" if item.get("reason") else ""))
    end = "timed out, tree killed" if res.timed_out else f"exit {res.exit_code}"
    for tid, lines in per.items():
        body = (f"Repair agent run {res.run_id} ({res.agent}, {iso(clock.now())}, {end}):\n"
                + "\n".join(f"- {ln}" for ln in lines)
                + f"\nRun totals: {res.calls} tool calls, {res.done} actions done, {res.refused} refused. "
                  f"Audit: `healer journal` events repair.call / repair.refused with subject {res.run_id}.")
        try:
            store.comment(tid, body, author="repair-agent")
        except Exception:  # the ticket vanished meanwhile: the event log still has it all
            continue
