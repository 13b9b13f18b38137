"""The `command` fault and probe: any argv, for game days against your own fleet.

A fault journals its `undo` argv (if any) BEFORE running, so the end of the run, `healer gameday
clean` or the next run undoes it even when the game day was SIGKILLed. No shell: argv lists only
(a string is split with shlex). A probe is a command whose exit status and output are the result.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from typing import Any


def argv(command: str | list[str]) -> list[str]:
    """The argv to run; `{python}` is this interpreter (the one healer is installed in)."""
    out = shlex.split(command) if isinstance(command, str) else [str(x) for x in command]
    out = [x.replace("{python}", sys.executable) for x in out]
    if not out:
        raise ValueError("command: expected a non-empty argv, got nothing")
    return out


def _run(cmd: list[str], cwd: str | None, timeout: float) -> dict[str, Any]:
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return {"status": 127, "stdout": "", "stderr": f"{cmd[0]}: command not found"}
    except subprocess.TimeoutExpired as e:
        return {"status": 124, "stdout": (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""),
                "stderr": f"timed out after {timeout:g}s"}
    return {"status": p.returncode, "stdout": p.stdout, "stderr": p.stderr}


def inject(command: str | list[str], *, undo: str | list[str] | None = None, cwd: str | None = None,
           timeout: float = 60, journal=None) -> dict[str, Any]:
    """Run a fault command; its undo (an argv) is journaled first. A failing command is an error."""
    cmd = argv(command)
    uid = None
    if undo is not None and journal is not None:
        uid = journal.register("command", argv=argv(undo), cwd=cwd, timeout=timeout, fault=cmd)
    res = _run(cmd, cwd, timeout)
    res.update(command=cmd, undo_id=uid)
    if res["status"] != 0:
        raise RuntimeError(f"command fault {shlex.join(cmd)} exited {res['status']}: {res['stderr'].strip()[-300:]}")
    return res


def probe(command: str | list[str], *, cwd: str | None = None, timeout: float = 60) -> dict[str, Any]:
    cmd = argv(command)
    return {**_run(cmd, cwd, timeout), "command": cmd}


def run_undo(data: dict[str, Any]) -> str:
    res = _run(list(data["argv"]), data.get("cwd"), float(data.get("timeout") or 60))
    return f"ran {shlex.join(data['argv'])}: exit {res['status']}"
