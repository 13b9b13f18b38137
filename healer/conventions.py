"""Names more than one part of healer agrees on: where things live, what they are called.

One spelling each, imported everywhere, so a typo cannot silently blind a reader:
the dispatcher creates `.healer/worktrees/T-1` on branch `healer/T-1`, the supervisor's
snapshot looks for orphans there, the remedies refuse to touch anything outside it, the
game days inject faults into it. Pure constants and path arithmetic (no I/O), so the
core may import it too.
"""

from __future__ import annotations

import re
from pathlib import Path

# -- folders and files under the fleet root ----------------------------------------
HEALER_DIR = ".healer"
DB_NAME = "healer.db"
WORKTREES_DIR = f"{HEALER_DIR}/worktrees"  # one linked worktree per ticket
SCRATCH_DIR = f"{HEALER_DIR}/scratch"  # merge results and main checks, healer's own
SCRATCH_TMP_DIR = f"{HEALER_DIR}/scratch-tmp"  # the sandboxed gates' private temp folders (a tmpfs over each)
HALT_FILE = f"{HEALER_DIR}/HALT"  # present: every remediation is observe-only
TASKS_DIR = f"{HEALER_DIR}/tasks"
AGENT_LOGS_DIR = f"{HEALER_DIR}/logs/agents"
EFFECTIVE_POLICY = f"{HEALER_DIR}/policy.effective.yaml"
POLICIES = f"{HEALER_DIR}/policies"  # the policies a dispatcher launched loops with: <sha256>.yaml, read-only
BRANCH_PREFIX = "healer/"


_TICKET_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def ticket_id_problem(ticket_id: str) -> str | None:
    """Why `ticket_id` cannot name a ticket (None when it can). An id becomes a folder name and a
    branch `healer/<id>`, so it must be a safe git ref component (the rules of `git check-ref-format`
    for the characters allowed here: no `..`, no trailing `.` or `.lock`)."""
    if not isinstance(ticket_id, str) or not _TICKET_ID.match(ticket_id):
        return "expected letters, digits, '.', '_' or '-' (at most 64, starting with a letter or digit)"
    if ".." in ticket_id or ticket_id.endswith(".") or ticket_id.endswith(".lock"):
        return "git refuses it as a branch name (no '..', no trailing '.' or '.lock')"
    return None


def branch_for(ticket_id: str) -> str:
    return f"{BRANCH_PREFIX}{ticket_id}"


def worktree_for(root: str | Path, ticket_id: str) -> Path:
    return Path(root) / WORKTREES_DIR / ticket_id


def scratch_dir(root: str | Path, name: str) -> Path:
    return Path(root) / SCRATCH_DIR / name


def scratch_tmp(root: str | Path, name: str) -> Path:
    return Path(root) / SCRATCH_TMP_DIR / name


def set_aside_dir(root: str | Path, kind: str) -> Path:
    """Where a half-made worktree is moved aside, kept (`scratch`, `worktrees`): .healer/<kind>-stale/."""
    return Path(root) / HEALER_DIR / f"{kind}-stale"


def halt_file(root: str | Path) -> Path:
    return Path(root) / HALT_FILE


def result_path(worktree: str | Path, run_id: str) -> Path:
    """Where a governed loop leaves its result (exit code, failure signature, gate-log tail)."""
    return Path(worktree) / HEALER_DIR / "runs" / run_id / "result.json"


# -- labels --------------------------------------------------------------------------
NEEDS_HUMAN_LABEL = "needs-human"
TO_REVIEW_LABEL = "to-review"

# -- actors and leases ---------------------------------------------------------------
DISPATCH_ACTOR = "dispatch"
SUPERVISOR_ACTOR = "supervisor"
DISPATCH_LEASE = "dispatcher"
SUPERVISOR_LEASE = "supervisor"
PAUSED_BY_MAIN_RED = "main_red"  # dispatch.paused_reason when the dispatcher paused for a red main

# -- settings keys (get_setting / set_setting) ----------------------------------------
DISPATCH_PAUSED = "dispatch.paused"
DISPATCH_PAUSED_REASON = "dispatch.paused_reason"  # "main_red" (the dispatcher's) or the remedy's PAUSED_BY_HEALER
DISPATCH_PAUSED_BY = "dispatch.paused_by"  # who paused it, when, why (pause_dispatch)
DISPATCH_LAST_LAUNCH = "dispatch.last_launch_at"
DISPATCH_LAST_TICK = "dispatch.last_tick_at"
DISPATCH_CYCLES = "dispatch.cycles"
DISPATCH_CRASHED = "dispatch.crashed_holders"  # dispatchers that died holding the lease (their agents died with them)
MAIN_STATUS = "main.status"  # green | red | unknown
MAIN_RED_SINCE = "main.red_since"
MAIN_CHECKED = "main.checked_commit"  # the commit the main gates last passed on
SUPERVISOR_LAST_TICK = "supervisor.last_tick_at"
SUPERVISOR_MEMORY = "supervisor.memory"
CLOCK_READING = "clock.reading:"  # + host: its last clock reading and known jumps (healer/fleet/timewatch.py)

# -- sentinels (findings about silence; alert keys) ------------------------------------
SENTINELS = ("dispatch_frozen", "pool_saturated", "no_closes", "main_red", "supervisor_silent", "spend_rate")
# each sentinel's fixed subject, hence its one alert key (`main_red:main`): whoever pages for a sentinel's
# condition (the supervisor, the dispatcher seeing main red) uses this key, so the per-key cooldown keeps
# it to one page per condition
SENTINEL_SUBJECT = {"dispatch_frozen": "dispatch", "pool_saturated": "pool", "no_closes": "proposals",
                    "main_red": "main", "supervisor_silent": "supervisor", "spend_rate": "spend"}


def sentinel_key(kind: str) -> str:
    return f"{kind}:{SENTINEL_SUBJECT[kind]}"

# adopted loops (docs/adopt.md): the finding kinds, most severe first, and the recovery refs of their worktrees
ADOPTED_FINDINGS = ("adopted_cost", "adopted_memory", "adopted_procs", "adopted_stuck", "adopted_iterations",
                    "adopted_same_failure", "adopted_cycle", "adopted_no_progress", "adopted_gone", "adopted_idle")
RECOVERY_REFS = "refs/healer/recovery"  # refs/healer/recovery/<adopted id>/<n>: a snapshot of uncommitted work
