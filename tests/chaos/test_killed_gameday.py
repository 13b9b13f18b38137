"""Acceptance 4: a game day SIGKILLed halfway leaves nothing behind once the next run starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest

from healer.clock import system


def _holders(home: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get("HEALER_TREE", "").startswith("gameday-busy-") and p.cwd().startswith(home):
                out.append(p)
        except (psutil.Error, OSError):
            continue
    return out


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_sigkilled_gameday_is_cleaned_by_the_next_run(tmp_path):
    home = str(tmp_path / "home")
    env = {**os.environ, "HEALER_GAMEDAY_HOME": home, "TMPDIR": str(tmp_path)}
    runner = subprocess.Popen([sys.executable, "-m", "healer", "gameday", "run", "busy-worktree", "--quiet",
                               "--workdir", str(tmp_path / "wd")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    clock = system()
    deadline = clock.monotonic() + 60
    while clock.monotonic() < deadline and not [p for p in _holders(str(tmp_path)) if p.pid]:
        clock.sleep(0.05)
    assert _holders(str(tmp_path)), "the busy-worktree fault never started its holder process"
    runner.send_signal(signal.SIGKILL)
    runner.wait(timeout=10)
    assert _holders(str(tmp_path)), "the holder should outlive the killed engine (own session)"
    r = subprocess.run([sys.executable, "-m", "healer", "gameday", "clean"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "kill_tree" in r.stdout
    assert not _holders(str(tmp_path))
