"""Agent presets and the prompt: pure functions from the policy to an argv and a text.

Never a shell: an argv is a list, placeholders are replaced inside each argument.
  claude   claude -p --output-format stream-json --verbose --include-partial-messages
           --permission-mode acceptEdits [--max-turns N]
           [--model M] [--max-budget-usd REMAINING] ...extra   (prompt on stdin)
  codex    codex exec --json --sandbox workspace-write --cd {workdir} [--model M] ...extra PROMPT
The output formats are the streaming ones: the runner counts spend per API turn as they print
(healer/loop/usage.py); `--verbose` is required by Claude for stream-json in -p mode; partial messages
carry each API call's final output-token count (message_delta) before the next call starts.
  command  any argv with {prompt_file} {workdir} {iteration}
"""

from __future__ import annotations

from collections.abc import Sequence

from healer.errors import InvalidInput
from healer.lite import dataclass

ARG_MAX_PROMPT = 100_000


@dataclass(frozen=True)
class AgentSpec:
    preset: str
    argv: tuple[str, ...]  # template, with placeholders
    stdin_prompt: bool = False  # the prompt file is the agent's stdin
    budget_flag: bool = False  # append --max-budget-usd REMAINING at each iteration


def preset_spec(preset: str, command: Sequence[str] = (), model: str | None = None, max_turns: int | None = None,
                extra_args: Sequence[str] = ()) -> AgentSpec:
    if preset == "claude":
        argv = ["claude", "-p", "--output-format", "stream-json", "--verbose", "--include-partial-messages",
                "--permission-mode", "acceptEdits"]
        if max_turns:
            argv += ["--max-turns", str(max_turns)]
        if model:
            argv += ["--model", model]
        return AgentSpec("claude", tuple(argv + list(extra_args)), stdin_prompt=True, budget_flag=True)
    if preset == "codex":
        argv = ["codex", "exec", "--json", "--sandbox", "workspace-write", "--cd", "{workdir}"]
        if model:
            argv += ["--model", model]
        return AgentSpec("codex", tuple(argv + list(extra_args) + ["{prompt}"]))
    if preset == "command":
        if not command:
            raise InvalidInput("loop.agent.command: expected an argv for preset 'command' (or pass --agent-cmd), got nothing")
        return AgentSpec("command", tuple(list(command) + list(extra_args)))
    raise InvalidInput(f"loop.agent.preset: expected command, claude or codex, got {preset!r}")


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
        "their exit codes count. Saying 'done' only makes the gates run.")


def build_prompt(*, task: str, progress: str, gate_log: str, lessons: str, iteration: int, max_iterations: int,
                 gates: Sequence[str], protected: Sequence[str], max_diff_lines: int, progress_lines: int = 60,
                 gate_log_lines: int = 80) -> str:
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
    rules.append(f"- Keep your change under {max_diff_lines} changed lines, or it is rolled back.")
    parts.append("# Instructions\n\n" + STEP + "\n\n" + "\n".join(rules) + "\n")
    return "\n".join(parts)
