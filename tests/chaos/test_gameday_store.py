"""A game day runs on its own throwaway fleet: an operator's exported HEALER_STORE_URL never redirects its writes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.long  # 16 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_real_game_day_ignores_an_exported_store_url(tmp_path):
    operator = tmp_path / "operator.db"  # what the operator's shell points at: never made, never written
    env = {**os.environ, "HEALER_STORE_URL": f"sqlite:{operator}", "HEALER_GAMEDAY_HOME": str(tmp_path / "home"),
           "TMPDIR": str(tmp_path)}
    env.pop("HEALER_FAILPOINTS", None)
    r = subprocess.run([sys.executable, "-m", "healer", "gameday", "run", "unknown-files-real", "--quiet", "--workdir",
                        str(tmp_path / "wd")], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert not operator.exists()
    assert (tmp_path / "wd" / "unknown-files-real" / "fleet" / ".healer" / "healer.db").exists()
