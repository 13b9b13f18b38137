"""`loop.sandbox_writable` takes files as well as folders (the claude preset's old advice was ~/.claude.json):
an existing file is bound as that file (it was exit 70, FileExistsError), a missing name with a suffix is
created as an empty file (it became a folder), a missing name without one (or with a trailing /) a folder."""

from __future__ import annotations

import sys

import yaml

from tests.agents.conftest import calc_repo, need_bwrap
from tests.agents.test_loop import loop

PY = sys.executable


def test_files_in_sandbox_writable_are_bound_as_files(tmp_path):
    need_bwrap()
    repo = calc_repo(tmp_path / "repo")
    existing, missing, folder = tmp_path / "state.json", tmp_path / "new.json", tmp_path / "cache"
    existing.write_text("{}\n")
    agent = [PY, "-c", (
        "import pathlib, sys\n"
        f"pathlib.Path({str(existing)!r}).write_text('{{\"n\": 1}}\\n')\n"
        f"pathlib.Path({str(missing)!r}).write_text('made\\n')\n"
        f"pathlib.Path({str(folder)!r}, 'x').write_text('x\\n')\n"
        "pathlib.Path('calc.py').write_text('def add(a, b):\\n    return a + b\\n')\n"
        f"open({str(tmp_path / 'nope.txt')!r}, 'w')\n")]
    pol = tmp_path / "p.yaml"
    pol.write_text(yaml.safe_dump({"version": 1, "loop": {
        "max_iterations": 1, "iteration_timeout": "30s", "kill_grace": "1s",
        "sandbox_writable": [str(existing), str(missing), str(folder) + "/"],
        "agent": {"command": agent}, "gates": [{"name": "tests", "run": [PY, "tests/test_calc.py"]}]}}))
    cp = loop(repo, pol, {})
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert existing.read_text() == '{"n": 1}\n' and missing.read_text() == "made\n"
    assert (folder / "x").read_text() == "x\n"
    assert not (tmp_path / "nope.txt").exists()  # the folder beside them stays read-only
    err = next((repo / ".healer" / "runs").glob("*/iter-001/agent.err")).read_text()
    assert "Read-only file system" in err
