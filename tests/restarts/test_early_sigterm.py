"""SIGTERM in the first moments of `healer loop run` stops it cleanly: exit 4 and a message, never 143."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.conftest import wait_until
from tests.loop.conftest import loop_repo, solved_gate, write_policy


def _armed(pid: int) -> bool:
    """The process catches SIGTERM (its SigCgt mask in /proc): `healer.early.arm()` has run, the first thing
    the executable does, before any of its imports. Watching for a library being mapped instead stopped
    working when the fast path stopped needing one (the loop can now start and end on the stdlib alone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except OSError:
        pass
    return False


def test_sigterm_while_the_cli_still_loads_exits_4_with_a_message(tmp_path):
    repo = loop_repo(tmp_path / "repo")
    pol = write_policy(tmp_path / "p.yaml", gates=[solved_gate()],
                       # an agent that never ends: the run cannot finish before the signal, however late it lands
                       agent={"preset": "command", "command": [sys.executable, "-c", "import time; time.sleep(600)"]})
    task = tmp_path / "task.md"
    task.write_text("# t\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HEALER_ROOT", "HEALER_AGENT_ID", "HEALER_FAILPOINTS")}
    for _ in range(2):
        p = subprocess.Popen([sys.executable, "-m", "healer", "loop", "run", "--policy", str(pol), "--workdir", str(repo),
                              "--task", str(task)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        wait_until(lambda p=p: _armed(p.pid), 60, "the CLI arming its early signal handler", poll=0.001)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 4, (p.returncode, out, err)
        assert "SIGTERM" in out + err
