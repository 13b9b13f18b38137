"""SIGTERM in the first moments of `healer loop run` stops it cleanly: exit 4 and a message, never 143."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.conftest import wait_until
from tests.loop.conftest import loop_repo, solved_gate, write_policy


def _loading_libraries(pid: int) -> bool:
    """The CLI's imports have begun: a compiled extension from site-packages is mapped."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return any("site-packages" in line and ".so" in line for line in f)
    except OSError:
        return False


def test_sigterm_while_the_cli_still_loads_exits_4_with_a_message(tmp_path):
    repo = loop_repo(tmp_path / "repo")
    pol = write_policy(tmp_path / "p.yaml", gates=[solved_gate()],
                       agent={"preset": "command", "command": [sys.executable, "-c", "pass"]})
    task = tmp_path / "task.md"
    task.write_text("# t\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HEALER_ROOT", "HEALER_AGENT_ID", "HEALER_FAILPOINTS")}
    for _ in range(2):
        p = subprocess.Popen([sys.executable, "-m", "healer", "loop", "run", "--policy", str(pol), "--workdir", str(repo),
                              "--task", str(task)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        wait_until(lambda p=p: _loading_libraries(p.pid), 60, "the CLI importing its libraries", poll=0.001)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 4, (p.returncode, out, err)
        assert "SIGTERM" in out + err
