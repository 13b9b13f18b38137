"""Real loops healer did not launch, for the adoption tests: the fixture loop.sh around the real Claude Code CLI
(scripted model server on 127.0.0.1), a CLI session in a private tmux server. Each test kills only what it started,
by its process group id."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from healer.clock import system
from healer.policy import Policy, load_policy
from healer.store import open_store
from healer.supervisor import Supervisor
from tests.agents.conftest import CLAUDE_MODEL, cli_path, need_cli
from tests.conftest import healer, make_repo

LOOP_SH = Path(os.environ.get("HEALER_LOOP_SH_FIXTURE", "/work/shared/fixtures/loop-sh/loop.sh"))


def need_loop_sh() -> Path:
    if not LOOP_SH.is_file():
        why = f"the loop.sh fixture is not at {LOOP_SH} (HEALER_LOOP_SH_FIXTURE names it)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {why}")
        pytest.skip(reason=why)
    return LOOP_SH


def claude_env(home: Path, model) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    tmp = home / ".tmp"  # Claude Code's scratch (claude-UID/, cc-socks/) with the test's files, never in /tmp
    tmp.mkdir(exist_ok=True)
    return {"HOME": str(home), "PATH": cli_path(), "ANTHROPIC_BASE_URL": model.anthropic_url,
            "ANTHROPIC_API_KEY": "sk-ant-kit", "LANG": "C.UTF-8", "TMPDIR": str(tmp)}


CLAUDE_ARGV = f"claude -p --permission-mode acceptEdits --allowedTools Bash,Read,Edit,Write --model {CLAUDE_MODEL}"


def worktree(path: Path) -> Path:
    wt = make_repo(path, {"README.md": "# wt\n", "task.md": "Make the tests pass.\n"})
    subprocess.run(["git", "-C", str(wt), "commit", "-q", "--allow-empty", "-m", "start"], check=True)
    return wt


def fleet(path: Path) -> Path:
    root = make_repo(path)
    assert healer("init", cwd=root).returncode == 0
    return root


def policy(root: Path, **rule) -> Policy:
    """The fleet's healer.yaml with one adopt rule (what `healer adopt` reads), and the same policy validated."""
    # only loops under this test's folder: the machine runs other tests' loops and CLIs, never ours to adopt
    rule.setdefault("worktrees", [str(root.parent)])
    data = {"version": 1, "adopt": {"enabled": True, "rules": [{"name": "loop", "match": [r"loop\.sh"], **rule}]},
            "remediation": {"quiet_period": "0s"}}
    (root / "healer.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return load_policy(root / "healer.yaml")


def supervisor(root: Path, pol: Policy) -> Supervisor:
    return Supervisor(root, pol, open_store(root, system()), system())


def start(argv: list[str], cwd: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def end(p: subprocess.Popen) -> None:
    """Kill a group this test started (its own session: pgid == pid)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        p.wait(timeout=10)


def until(what, timeout: float = 60.0, clock=None):
    """Poll `what()` until it returns something truthy (a state, never a sleep standing for one)."""
    clock = clock or system()
    deadline = clock.monotonic() + timeout
    while True:
        got = what()
        if got:
            return got
        if clock.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {getattr(what, '__doc__', None) or what}")
        clock.sleep(0.1)


def adopt_json(root: Path, *extra: str) -> list[dict]:
    r = healer("adopt", "--json", "--root", str(root), *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["loops"]


__all__ = ["CLAUDE_ARGV", "claude_env", "end", "fleet", "need_cli", "need_loop_sh", "policy", "start", "supervisor",
           "until", "worktree"]
