"""Agent presets and the prompt: pure functions from the policy to an argv and a text.

Never a shell: an argv is a list, placeholders are replaced inside each argument.
  claude   claude -p --output-format stream-json --verbose --include-partial-messages
           --permission-mode acceptEdits [--max-turns N] [--model M]
           --allowedTools TOOLS ...extra [--max-budget-usd REMAINING]   (prompt on stdin)
  codex    codex exec --json SANDBOX --skip-git-repo-check -c OFFLINE... --cd {workdir} [--model M] ...extra PROMPT
The output formats are the streaming ones: the runner counts spend per API turn as they print
(healer/loop/usage.py); `--verbose` is required by Claude for stream-json in -p mode; partial messages
carry each API call's final output-token count (message_delta) before the next call starts.
  command  any argv with {prompt_file} {workdir} {iteration}

The two CLIs as healer runs them (docs/agents.md, issue 32):
- tools: `loop.agent.tools` is Claude's `--allowedTools` (in -p mode acceptEdits alone refuses Bash).
  Codex has no per-tool list: healer's sandbox replaces Codex's own. Under bwrap/container Codex gets
  its bypass flag (its own --sandbox sets up a user namespace, which fails inside bubblewrap: "setting
  up uid map: Read-only file system"); unsandboxed it keeps `--sandbox workspace-write`.
- config home: each run has its own (CLAUDE_CONFIG_DIR, CODEX_HOME) in the run's folder, seeded from
  the user's credentials and settings (`seeds`) before every iteration, so nothing the agent plants
  there (a hook in settings.json) outlives the iteration, and the user's real config is never writable.
- offline: no update checks, telemetry or error reports (`offline_env`, the codex `-c` overrides).
- endpoint: the model API's host:port (`endpoint`), for the sandbox's network allow-list and for a
  check before the first iteration: a CLI that cannot reach it, cannot find its binary or refuses its
  config is one line and exit 69 (`start_failure`), never iterations burnt as "stalled".
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from healer.errors import InvalidInput

ARG_MAX_PROMPT = 100_000
CLI_PRESETS = ("claude", "codex")
DEFAULT_TOOLS = ("Bash", "Edit", "Write", "Read", "Glob", "Grep")
CODEX_BYPASS = "--dangerously-bypass-approvals-and-sandbox"
# the environment variable that moves each CLI's config home, and the user's default one
HOME_VAR = {"claude": "CLAUDE_CONFIG_DIR", "codex": "CODEX_HOME"}
USER_HOME = {"claude": "~/.claude", "codex": "~/.codex"}
# what is copied from the user's config home into the run's: credentials and settings (these, and every other
# top-level .toml/.json/.md file of at most SEED_MAX bytes: profiles such as codex's NAME.config.toml, settings.local.json,
# CLAUDE.md/AGENTS.md), never history, logs or session folders
SEEDS = {"claude": (".credentials.json", "settings.json", ".claude.json"), "codex": ("auth.json", "config.toml")}
SEED_SUFFIXES = (".toml", ".json", ".md")
SEED_MAX = 1 << 20
DEFAULT_API = {"claude": ("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
               "codex": ("OPENAI_BASE_URL", "https://api.openai.com/v1")}
# no update checks, no telemetry, no error reports: the agent talks to its model endpoint only
OFFLINE_ENV = {"claude": {"DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                          "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1"},
               "codex": {}}
DEFAULT_WHERE = "the CLI's default API host"
CODEX_OFFLINE = ("-c", "check_for_update_on_startup=false", "-c", "analytics.enabled=false",
                 "-c", "feedback.enabled=false")


@dataclass(frozen=True)
class AgentSpec:
    preset: str
    argv: tuple[str, ...]  # template, with placeholders
    stdin_prompt: bool = False  # the prompt file is the agent's stdin
    budget_flag: bool = False  # append --max-budget-usd REMAINING at each iteration


def preset_spec(preset: str, command: Sequence[str] = (), model: str | None = None, max_turns: int | None = None,
                extra_args: Sequence[str] = (), tools: Sequence[str] | None = DEFAULT_TOOLS,
                sandboxed: bool = True) -> AgentSpec:
    """`tools`: what the agent may use (Claude's --allowedTools; None: the CLI's own default). `sandboxed`: healer
    runs the agent in bwrap or a container, so Codex's own sandbox is bypassed rather than nested."""
    if preset == "claude":
        argv = ["claude", "-p", "--output-format", "stream-json", "--verbose", "--include-partial-messages",
                "--permission-mode", "acceptEdits"]
        if max_turns:
            argv += ["--max-turns", str(max_turns)]
        if model:
            argv += ["--model", model]
        if tools is not None:
            argv += ["--allowedTools", ",".join(tools)]
        return AgentSpec("claude", tuple(argv + list(extra_args)), stdin_prompt=True, budget_flag=True)
    if preset == "codex":
        argv = ["codex", "exec", "--json", *([CODEX_BYPASS] if sandboxed else ["--sandbox", "workspace-write"]),
                "--skip-git-repo-check", *CODEX_OFFLINE, "--cd", "{workdir}"]
        if model:
            argv += ["--model", model]
        return AgentSpec("codex", tuple(argv + list(extra_args) + ["{prompt}"]))
    if preset == "command":
        if not command:
            raise InvalidInput("loop.agent.command: expected an argv for preset 'command' (or pass --agent-cmd), got nothing")
        return AgentSpec("command", tuple(list(command) + list(extra_args)))
    raise InvalidInput(f"loop.agent.preset: expected command, claude or codex, got {preset!r}")


def offline_env(preset: str) -> dict[str, str]:
    return dict(OFFLINE_ENV.get(preset, {}))


def user_home(preset: str, env: Mapping[str, str]) -> str:
    """The user's own config home of the CLI: where the run's is seeded from (never written)."""
    return env.get(HOME_VAR[preset]) or os.path.expanduser(USER_HOME[preset])


def seeds(preset: str, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """(source, name in the run's home) for each file to copy; Claude's global config ~/.claude.json lives beside
    ~/.claude unless CLAUDE_CONFIG_DIR moved both."""
    home = user_home(preset, env)
    out = []
    for name in SEEDS.get(preset, ()):
        if preset == "claude" and name == ".claude.json" and not env.get(HOME_VAR[preset]):
            out.append((os.path.expanduser("~/.claude.json"), name))
        else:
            out.append((os.path.join(home, name), name))
    return out


def more_seeds(preset: str, env: Mapping[str, str], names: Sequence[str]) -> list[tuple[str, str]]:
    """Of the names in the user's config home, the other files worth seeding (settings by their suffix)."""
    fixed = {n for _, n in seeds(preset, env)}
    home = user_home(preset, env)
    return [(os.path.join(home, n), n) for n in sorted(names)
            if n not in fixed and n.endswith(SEED_SUFFIXES) and not n.startswith(".")]


def endpoint(preset: str, env: Mapping[str, str], codex_config: str = "") -> tuple[str, int, str]:
    """(host, port, where it came from) of the model API the CLI calls: ANTHROPIC_BASE_URL for Claude; for Codex
    the base_url of the config's model_provider, else OPENAI_BASE_URL; else the CLI's default API host (`where`
    is then DEFAULT_WHERE)."""
    var, default = DEFAULT_API[preset]
    url, where = env.get(var) or "", var
    if preset == "codex" and codex_config:
        # here, not at module level: tomllib brings typing and datetime, +8 ms of CPU per loop start (2026-12-05,
        # 15 paired starts on the loaded machine, where the bench's wall ratio follows the CPU), for Codex only
        import tomllib  # lazy: pulls tomllib: 3.4 ms of `loop run`'s start

        try:
            cfg = tomllib.loads(codex_config)
        except tomllib.TOMLDecodeError:
            cfg = {}
        prov = cfg.get("model_provider")
        base = (cfg.get("model_providers") or {}).get(prov, {}).get("base_url") if isinstance(prov, str) else None
        if isinstance(base, str) and base:
            url, where = base, f"config.toml model_providers.{prov}.base_url"
    if not url:
        url, where = default, DEFAULT_WHERE
    u = urlsplit(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    return (u.hostname or "", port, where)


def start_failure(preset: str, exit_code: int | None, out: str, err: str) -> str | None:
    """Why a CLI never got going, from one iteration that ended by itself with a non-zero exit and without a single
    answer of its model: refused flags or config, no credentials, no endpoint. None: the model answered at least
    once (the agent ran; its failure is the loop's business), or not a CLI preset. Claude's `--output-format` json
    and stream-json, Codex's `--json` events and plain text are all read."""
    if preset not in CLI_PRESETS or exit_code in (0, None):
        return None
    said: list[str] = []
    for line in out.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if not isinstance(ev, dict):
            continue
        kind = ev.get("type")
        if kind == "result":
            if ev.get("modelUsage") or not ev.get("is_error"):
                return None
            said.append(str(ev.get("result") or ev.get("terminal_reason") or ""))
        elif kind == "assistant" and (ev.get("message") or {}).get("model") not in (None, "<synthetic>"):
            return None
        elif kind == "turn.completed":
            return None
        elif kind == "item.completed" and (ev.get("item") or {}).get("type") not in (None, "error"):
            return None
        elif kind in ("error", "turn.failed"):
            e = ev.get("error")
            said.append(str(ev.get("message") or (e.get("message") if isinstance(e, dict) else e) or ""))
    said += [ln.strip() for ln in err.splitlines() if ln.strip() and not ln.startswith("WARNING: proceeding")]
    said = [s for s in said if s]
    return (said[0] if said else f"exit {exit_code}, nothing on stdout or stderr")[:300]


def prompt_on_stdin(spec: AgentSpec, argv: Sequence[str]) -> bool:
    return spec.stdin_prompt or (spec.preset == "codex" and bool(argv) and argv[-1] == "-")


def render(spec: AgentSpec, *, prompt_file: str, workdir: str, iteration: int, prompt: str = "",
           remaining_usd: float | None = None) -> list[str]:
    subs = {"{prompt_file}": prompt_file, "{workdir}": workdir, "{iteration}": str(iteration)}
    out = []
    for arg in spec.argv:
        if arg == "{prompt}" and spec.preset == "codex":
            # one argv string is capped by the kernel (128 KiB); a longer prompt goes on stdin
            out.append(prompt if len(prompt.encode()) <= ARG_MAX_PROMPT else "-")
            continue
        for k, v in subs.items():
            arg = arg.replace(k, v)
        out.append(arg)
    if spec.budget_flag and remaining_usd is not None:
        # claude's own per-run cap: what is left of the loop's spend cap
        out += ["--max-budget-usd", f"{max(remaining_usd, 0.01):.2f}"]
    return out


def tail(text: str, n: int) -> str:
    lines = text.splitlines()
    return "\n".join(lines[-n:]) if n > 0 else ""


STEP = ("Take ONE small step toward the task, then stop. Do not try to finish everything at once.\n"
        "You do not decide when the task is done: after you stop, the loop runs the gates below and only\n"
        "their results count (a pytest gate's report: every protected test ran and passed). The gates' own\n"
        "files (pytest's config, conftest.py outside the protected paths, a script or Makefile a gate names)\n"
        "are the base's: a gate whose files you change fails. Saying 'done' only makes the gates run.")


def build_prompt(*, task: str, progress: str, gate_log: str, lessons: str, iteration: int, max_iterations: int,
                 gates: Sequence[str], protected: Sequence[str], max_diff_lines: int, progress_lines: int = 60,
                 gate_log_lines: int = 80, guarded: Sequence[str] = ()) -> str:
    parts = [f"# Task\n\n{task.strip()}\n"]
    if lessons.strip():
        parts.append(f"# Lessons (lessons.md)\n\n{tail(lessons, progress_lines)}\n")
    prog = tail(progress, progress_lines)
    parts.append(f"# Progress so far (last {progress_lines} lines of progress.md)\n\n{prog or '(nothing yet)'}\n")
    log = tail(gate_log, gate_log_lines)
    parts.append(f"# Previous gate log (last {gate_log_lines} lines)\n\n" + (f"```\n{log}\n```\n" if log else "(no gates run yet)\n"))
    rules = [f"- This is iteration {iteration} of at most {max_iterations}.",
             f"- Gates, cheapest first: {', '.join(gates) or '(none)'}."]
    if protected:
        rules.append(f"- Do not change protected paths ({', '.join(protected)}): such changes are reverted.")
    if guarded:  # healer/guarded.py: the fleet's configuration and the instruction files, whatever protected says
        rules.append(f"- Do not write the fleet's configuration ({', '.join(guarded)}) nor agent-instruction or "
                     "tool-config files (.claude/, AGENTS.md, CLAUDE.md, .envrc, .vscode/, .github/workflows/, ...): "
                     "they are set aside after your step and never committed.")
    rules.append(f"- Keep your change under {max_diff_lines} changed lines, or it is rolled back.")
    parts.append("# Instructions\n\n" + STEP + "\n\n" + "\n".join(rules) + "\n")
    return "\n".join(parts)
