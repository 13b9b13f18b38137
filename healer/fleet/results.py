"""The result file a governed loop leaves when it ends: `WORKDIR/.healer/runs/RUN_ID/result.json`.

Read by whoever must know how an agent ended before judging it (the dispatcher's reap,
the supervisor's snapshot, remediation preconditions): reap before you judge.
"""

from __future__ import annotations

import json
from pathlib import Path


def result_path(worktree: str | Path, run_id: str) -> Path:
    return Path(worktree) / ".healer" / "runs" / run_id / "result.json"


def read_result(worktree: str | None, run_id: str | None) -> dict | None:
    if not worktree or not run_id:
        return None
    try:
        data = json.loads(result_path(worktree, run_id).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("run_id") not in (None, run_id):
        return None
    return data


def result_exit(worktree: str | None, run_id: str | None) -> int | None:
    res = read_result(worktree, run_id)
    code = res.get("exit_code") if res else None
    return code if isinstance(code, int) and not isinstance(code, bool) else None
