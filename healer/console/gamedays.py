"""This fleet's game days: the reports under .healer/gamedays/<stamp>-<scenario>/ (listed and served), and a shipped
`--root` scenario started as a child `healer gameday run NAME --root FLEET --report DIR`: the CLI's own code path,
in its own process (a game day that hangs or crashes takes the console with it never)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from healer.clock import iso

FOLDER = Path(".healer") / "gamedays"
SERVED = ("report.html", "report.md", "journal.json", "junit.xml", "output.log")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,120}$")


def folder(root: Path) -> Path:
    return root / FOLDER


def shipped_root_scenarios() -> dict[str, Path]:
    """name -> file of the shipped `for_root: true` scenarios (chaos/scenarios/root/), found without importing chaos."""
    spec = importlib.util.find_spec("chaos")
    if spec is None or not spec.submodule_search_locations:
        return {}
    out: dict[str, Path] = {}
    for loc in spec.submodule_search_locations:
        for f in sorted((Path(loc) / "scenarios" / "root").glob("*.yaml")):
            out.setdefault(f.stem, f)
    return out


def _status(d: Path) -> str:
    try:
        j = json.loads((d / "journal.json").read_text())
    except (OSError, ValueError):
        return "running or cut short" if (d / "output.log").exists() else "-"
    if not isinstance(j, dict):
        return "-"
    st = j.get("status")
    return f"{st}{' (deviated)' if j.get('deviated') else ''}" if isinstance(st, str) else "-"


def reports(root: Path) -> list[dict[str, Any]]:
    base = folder(root)
    if not base.is_dir():
        return []
    out = []
    for d in sorted((p for p in base.iterdir() if p.is_dir() and not p.is_symlink() and _NAME.match(p.name)), reverse=True):
        out.append({"name": d.name, "status": _status(d), "files": [f for f in SERVED if (d / f).is_file()]})
    return out


def report_file(root: Path, name: str, file: str) -> Path | None:
    """A served file, or None: only the known file names, in a report folder, not through a symlink."""
    if file not in SERVED or not _NAME.match(name or ""):
        return None
    p = folder(root) / name / file
    if p.is_symlink() or p.parent.is_symlink() or not p.is_file():
        return None
    return p


class Runner:
    """The game days this console started: child processes, reaped by a thread each, stopped when the console stops."""

    def __init__(self, root: Path, clock) -> None:
        self.root, self.clock = root, clock
        self.started: list[dict[str, Any]] = []
        self._procs: list[subprocess.Popen] = []
        self._lock = threading.Lock()

    def start(self, scenario: str) -> dict[str, Any]:
        files = shipped_root_scenarios()
        if scenario not in files:
            raise KeyError(scenario)
        stamp = re.sub(r"[^0-9T]", "", iso(self.clock.now()))[:15]  # 20261207T081500 (UTC)
        name = f"{stamp}-{scenario}"
        out = folder(self.root) / name
        n = 1
        while out.exists():
            n += 1
            out = folder(self.root) / f"{name}-{n}"
        out.mkdir(parents=True)
        argv = [sys.executable, "-m", "healer", "gameday", "run", str(files[scenario]), "--root", str(self.root),
                "--report", str(out), "--junit", str(out / "junit.xml"), "--quiet"]
        with open(out / "output.log", "wb") as log:
            p = subprocess.Popen(argv, cwd=self.root, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 env={**os.environ, "HEALER_ROOT": str(self.root)})
        row = {"name": out.name, "scenario": scenario, "pid": p.pid, "state": "running", "argv": argv}
        with self._lock:
            self.started.append(row)
            self._procs.append(p)
        threading.Thread(target=self._reap, args=(p, row), name=f"gameday-{p.pid}", daemon=True).start()
        return row

    def _reap(self, p: subprocess.Popen, row: dict[str, Any]) -> None:
        code = p.wait()
        row["state"] = f"exit {code}"

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM each game day still running (it writes its partial report), SIGKILL after the grace."""
        with self._lock:
            procs = list(self._procs)
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
