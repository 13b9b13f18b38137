"""One list of faults: the registry names exactly the scenario schema's faults, and the CLI prints it."""

from __future__ import annotations

import json
import subprocess
import sys

from chaos.faults.registry import FAULTS, REAL, SIM, unsupported
from chaos.scenario import FAULTS as SCHEMA_FAULTS


def test_registry_equals_the_schema():
    assert set(FAULTS) == set(SCHEMA_FAULTS)


def test_a_fault_outside_its_world_is_reported_not_raised():
    assert unsupported("clock_jump", REAL) and unsupported("clock_jump", SIM) is None
    assert unsupported("index_lock", SIM) and unsupported("nope", SIM) == "unknown fault nope"


def test_gameday_list_faults():
    out = subprocess.run([sys.executable, "-m", "healer", "gameday", "list", "--faults", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {r["fault"] for r in rows} == set(FAULTS)
    assert all(r["worlds"] and r["what"] for r in rows)
