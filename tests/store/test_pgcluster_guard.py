"""chaos/pgcluster.py: a throwaway cluster whose owner is SIGKILLed does not outlive it (the guard stops the
server and removes its folder), so a cut-short test run leaves no PostgreSQL in the temp folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from chaos import pgcluster
from tests.conftest import REPO, wait_until

OWNER = """
import os, sys
sys.path.insert(0, sys.argv[1])
from chaos.pgcluster import Cluster
c = Cluster().start()
print(c.dir, c.pid, flush=True)
os.kill(os.getpid(), 9)
"""


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@pytest.mark.skipif(not pgcluster.available(), reason="no PostgreSQL binaries (initdb, pg_ctl) on this machine")
def test_a_sigkilled_owners_cluster_is_stopped_and_removed():
    p = subprocess.run([sys.executable, "-c", OWNER, str(REPO)], capture_output=True, text=True, timeout=180)
    assert p.returncode == -9, p.stderr
    folder, pid = p.stdout.split()
    wait_until(lambda: not Path(folder).exists() and not psutil.pid_exists(int(pid)), 60, "the guard to stop the cluster")
