"""The policy's `adopt:` section (docs/adopt.md): which running agent loops healer did not launch it adopts, and the
thresholds it holds them to. Validated like the rest of the policy (located one-line errors, durations with a unit).

Each rule matches a process by its argv (regular expressions, searched in the argv joined by spaces), in a git
worktree (its cwd under a git repository's top level); its CLI says which session transcripts carry its spend
(Claude Code: ~/.claude/projects/<cwd with / as ->/<session>.jsonl; Codex: ~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from healer.policy.units import Duration, PosInt, Size, written

# where each CLI writes its session transcripts by default (seen by running the pinned CLIs: docs/adopt.md)
SESSION_GLOBS = {
    "claude": ("~/.claude/projects/**/*.jsonl",),
    "codex": ("~/.codex/sessions/**/*.jsonl",),
    "command": (),
}


def _regex(v: str) -> str:
    try:
        re.compile(v)
    except re.error as e:
        raise ValueError(f"expected a regular expression, got {v!r} ({e})") from None
    return v


Regex = Annotated[str, AfterValidator(_regex)]


class AdoptRule(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$", description="the rule's name (events, findings)")
    match: list[Regex] = Field(min_length=1, description="argv regular expressions: a process whose argv (joined by "
                                                         "spaces) one of them finds is a candidate")
    worktrees: list[str] = Field(default_factory=list, description="only loops whose worktree lies under one of "
                                                                   "these folders (~ is healer's home); empty: anywhere")
    exclude: list[Regex] = Field(default_factory=list, description="argv regular expressions that veto a match")
    cli: Literal["auto", "claude", "codex", "command"] = Field(
        "auto", description="whose session transcripts carry its spend; auto: claude or codex from the argv")
    session_files: list[str] | None = Field(
        None, description="globs of the CLI's session files (~ is the process owner's home); null: the CLI's own")
    activity_files: list[str] = Field(default_factory=list, description="globs inside the worktree whose mtime "
                                                                        "counts as activity besides its files")
    iterations_glob: str | None = Field(None, description="files inside the worktree, one per iteration of a known "
                                                          "loop runner (loop.sh: .loop/prompt-*.md)")
    allow_stop: bool = Field(False, description="healer may stop it (SIGTERM to its group, SIGKILL after kill_grace), "
                                                "always after a snapshot of its worktree")
    restart_command: list[str] | None = Field(None, description="argv healer may start in the worktree after a stop; "
                                                                "never a shell; null: never restarted")
    kill_grace: Duration = Field(written("10s"), description="SIGTERM -> SIGKILL grace")
    idle: Duration | None = Field(written("30m"), description="no session, output or worktree file written for this long")
    stuck: Duration | None = Field(written("6h"), description="running this long in all (age)")
    no_progress: Duration | None = Field(written("1h"), description="HEAD and the worktree's diff unchanged this long")
    cost_cap_usd: float | None = Field(None, ge=0, description="spend read from its session transcripts")
    max_iterations: PosInt | None = Field(None, description="iterations counted by iterations_glob")
    max_procs: PosInt | None = Field(None, description="processes of the loop (its process group when it leads one, "
                                                       "and every descendant of its process), from /proc")
    max_memory: Size | None = Field(None, description="their summed resident memory (RSS), a size with its unit: "
                                                      "512MiB, 2GiB")
    failure_files: list[str] = Field(default_factory=list, description="globs inside the worktree of the loop's "
                                                                       "failure output (loop.sh: .loop/gates.log)")
    same_failure: PosInt | None = Field(3, description="the same failure signature this many times in a row "
                                                       "(failure_files, each new write one time)")
    transcript_failures: bool = Field(True, description="its transcripts' failed tool calls count too: the same "
                                                        "failure signature `same_failure` tool results in a row")
    gone_alert: Duration | None = Field(written("1h"), description="a loop that ended without healer stopping it is "
                                                                   "reported this long (adopted_gone); null: never")

    @model_validator(mode="after")
    def _restart(self):
        if self.restart_command is not None and not self.restart_command:
            raise ValueError("expected an argv (a non-empty list) or null, got [] @restart_command")
        return self

class Adopt(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    enabled: bool = Field(False, description="the supervisor scans for these loops every tick (healer adopt: now)")
    rules: list[AdoptRule] = Field(default_factory=list, description="first rule that matches a process wins")
    history: PosInt = Field(8, description="worktree states kept per adopted loop (A-B-A-B)")

    @model_validator(mode="after")
    def _unique(self):
        seen: set[str] = set()
        for i, r in enumerate(self.rules):
            if r.name in seen:
                raise ValueError(f"expected unique rule names, got {r.name!r} twice @rules.{i}.name")
            seen.add(r.name)
        return self

