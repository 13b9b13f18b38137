"""Fixtures for the governed loop: real temporary git repositories, real policies, the real CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from tests.conftest import git, make_repo

PY = sys.executable
AGENTS = Path(__file__).resolve().parents[2] / "chaos" / "agents"
GATE = str(AGENTS / "loop_gate.py")


def agent(name: str, *args: str) -> list[str]:
    return [PY, str(AGENTS / name), *args]


def gate(name: str, *argv: str, timeout: str = "20s") -> dict:
    return {"name": name, "run": list(argv), "timeout": timeout}


def py_tests_gate(*paths: str) -> dict:
    # plugin autoload off: the venv's plugins cost seconds per start and say nothing about the code under test;
    # no bytecode: an agent that rewrites a module with the same size in the same second would be judged by the
    # stale .pyc of its previous version (Python checks a source's mtime in whole seconds and its size)
    return gate("tests", "env", "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1", "PYTHONDONTWRITEBYTECODE=1", PY, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                *(paths or ("tests",)))


def steps_gate(k: int) -> dict:
    return gate("steps", PY, GATE, "steps", str(k))


def solved_gate(file: str = "attempt.txt") -> dict:
    return gate("solved", PY, GATE, "solved", file)


def loop_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    repo = make_repo(path, files)
    (repo / ".gitignore").write_text(".healer/\n__pycache__/\n.pytest_cache/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "ignore caches")
    return repo


def write_policy(path: Path, **loop) -> Path:
    # sandboxed when bubblewrap works here (the default `auto`); the test's own folder (pid files,
    # markers beside the repository) stays writable for the scripted agents
    base = {"max_iterations": 6, "iteration_timeout": "20s", "kill_grace": "1s", "sandbox_writable": [str(path.parent)]}
    base.update(loop)
    path.write_text(yaml.safe_dump({"version": 1, "loop": base}, sort_keys=False))
    return path


def run_loop_cli(repo: Path, policy: Path, *extra: str, task: Path | None = None, env: dict | None = None,
                 timeout: float = 120) -> subprocess.CompletedProcess:
    if task is None:
        task = repo.parent / "task.md"
        if not task.exists():
            task.write_text("# Task\n\nMake the gates pass.\n")
    args = [PY, "-m", "healer", "loop", "run", "--policy", str(policy), "--workdir", str(repo)]
    if "--resume" not in extra:
        args += ["--task", str(task)]
    full = {k: v for k, v in os.environ.items() if k not in ("HEALER_ROOT", "HEALER_AGENT_ID", "HEALER_FAILPOINTS")}
    full.update(env or {})
    return subprocess.run(args + list(extra), capture_output=True, text=True, env=full, timeout=timeout)


def run_dir(repo: Path, run_id: str) -> Path:
    return repo / ".healer" / "runs" / run_id


def state(repo: Path, run_id: str) -> dict:
    return json.loads((run_dir(repo, run_id) / "state.json").read_text())


def result(repo: Path, run_id: str) -> dict:
    return json.loads((run_dir(repo, run_id) / "result.json").read_text())


def events(root: Path, prefix: str = "loop.", subject: str | None = None):
    from healer.store import open_store

    s = open_store(root)
    try:
        return s.events(prefix=prefix, subject=subject)
    finally:
        s.close()


def loop_commits(repo: Path) -> list[str]:
    out = git(repo, "log", "--format=%s")
    return [line for line in out.splitlines() if line.startswith("loop:")]


def final_line(cp: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in cp.stdout.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def live(pids) -> list[int]:
    """The pids still running (a zombie waiting for its parent counts as gone)."""
    out = []
    for p in pids:
        try:
            if psutil.Process(p).status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def carrying(needle: str | Path) -> list[int]:
    """Host processes (not zombies) whose command line holds `needle`: what a test agent started, found on the host.
    The pids an agent writes down are its pid namespace's under bwrap (issue 31), never to be looked up here."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if os.fsencode(str(needle)) in cmd and state not in (b"Z", b"X") and int(name) != os.getpid():
            out.append(int(name))
    return out


def kill_listed(pids_file: Path) -> None:
    """SIGKILL every process of a test agent that wrote to `pids_file` (its path is on their command lines): nothing
    outlives a failed test."""
    for p in carrying(pids_file):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture
def lrepo(tmp_path: Path) -> Path:
    return loop_repo(tmp_path / "repo")


def git_add_tree(repo: Path) -> str:
    """The tree git itself writes for the working tree, in a throwaway copy of the index (tracked files stay
    tracked, ignored or not; the loop's files left out): the oracle for the snapshots healer builds."""
    idx = repo / ".healer" / "truth.index"
    idx.parent.mkdir(exist_ok=True)
    real = repo / ".git" / "index"
    idx.write_bytes(real.read_bytes())
    st = os.stat(real)  # dated as the real one: else git trusts an entry racily clean in it (same tick)
    os.utime(idx, ns=(st.st_atime_ns, st.st_mtime_ns))
    env = {**os.environ, "GIT_INDEX_FILE": str(idx)}
    subprocess.run(["git", "add", "-A", "--", ":/", ":(exclude,top)progress.md", ":(exclude,top)lessons.md"], cwd=repo,
                   env=env, check=True, capture_output=True)
    return subprocess.run(["git", "write-tree"], cwd=repo, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()
