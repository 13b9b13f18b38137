"""An agent rewrites the fleet's board from inside its loop (issue 39): it reads the store from
ROOT/.healer/config.yaml and runs `healer board move/comment` on another ticket. Before, from the default sandbox
(network on) and a PostgreSQL store, the ticket was closed and the event log said `actor=human`.

Now: the board's writes refuse a process inside a loop run on the kernel's evidence (healer/insider.py: its cgroup,
its pid namespace's init, a loop runner among its ancestors; an environment variable would be the agent's to
unset), and the default sandbox has no network, so the server is out of reach of a program of the agent's own too.
Real loop runs (`healer loop run`), the real bwrap, real SQLite and PostgreSQL stores.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from healer import insider
from tests.conftest import healer
from tests.security.conftest import PY, need_bwrap, policy, target_repo
from tests.store.conftest import fresh_schema

TICKET = "T-9"


def _fleet(tmp: Path, store: str | None) -> Path:
    root = tmp / "fleet"
    root.mkdir()
    r = healer("init", "--root", str(root), *(["--store", store] if store else []))
    assert r.returncode == 0, r.stderr
    r = healer("board", "add", "another ticket", "--id", TICKET, "--root", str(root))
    assert r.returncode == 0, r.stderr
    return root


def _attack(tmp: Path, root: Path, mode: str, cgroup: str, **loop) -> dict:
    repo = target_repo(tmp / "repo")
    pol = policy(mode, "board", str(root), TICKET, "report.json", **loop)
    pfile = tmp / "policy.yaml"
    pfile.write_text(yaml.safe_dump({"version": 1, "loop": pol.loop.model_dump(mode="json", by_alias=True)}))
    task = tmp / "task.md"
    task.write_text("make tests pass\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HEALER_ROOT", "HEALER_STORE_URL")}
    env["HEALER_CGROUP"] = cgroup  # off: as on a host where the user has no writable cgroup
    r = subprocess.run([PY, "-m", "healer", "loop", "run", "--policy", str(pfile), "--workdir", str(repo),
                        "--task", str(task)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode not in (0, 70), r.stderr[-3000:]
    return json.loads((repo / "report.json").read_text())


def _board_untouched(root: Path) -> None:
    r = healer("board", "show", TICKET, "--root", str(root), "--json")
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    assert (shown.get("ticket") or shown)["state"] == "queued", shown
    assert "closed by the agent" not in r.stdout


def _refused(got: dict) -> None:
    for k in ("move", "comment"):
        assert got[k].startswith("exit 64") and "refused: this process runs inside a loop run" in got[k], got


@pytest.mark.parametrize(("mode", "cgroup"), [("none", "auto"), ("none", "off"), ("bwrap", "off")])
def test_a_board_write_from_inside_a_loop_is_refused(tmp_path, mode, cgroup):
    """Unsandboxed (the cgroup, or without one the runner among its ancestors) and sandboxed (bwrap's pid
    namespace); the SQLite store is writable to an unsandboxed agent, so only the refusal keeps the board."""
    if mode == "bwrap":
        need_bwrap()
    if mode == "none" and cgroup == "auto" and os.geteuid() != 0:
        pytest.skip(reason="a writable cgroup is root's here; the `off` case is the unprivileged one")
    root = _fleet(tmp_path, None)
    _refused(_attack(tmp_path, root, mode, cgroup))
    _board_untouched(root)


def test_postgresql_with_network_on_is_refused_and_off_is_unreachable(tmp_path):
    """The issue's own case: a PostgreSQL store on 127.0.0.1. Network on (the policy says so): the CLI refuses.
    Network off (the default): the server itself is out of reach, whatever program the agent writes."""
    need_bwrap()
    server = os.environ.get("HEALER_TEST_PG_URL")
    if not server:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but no HEALER_TEST_PG_URL: .ci/run must start PostgreSQL")
        pytest.skip(reason="needs a PostgreSQL server: set HEALER_TEST_PG_URL")
    with fresh_schema(server) as url:
        _pg_case(tmp_path, url)


def _pg_case(tmp_path: Path, url: str) -> None:
    root = _fleet(tmp_path, url)
    got = _attack(tmp_path / "on", root, "bwrap", "auto", sandbox_network=True)
    _refused(got)
    assert got["server"] == "connected"  # network on is the host's network (docs/security.md, known limits)
    got = _attack(tmp_path / "off", root, "bwrap", "auto")
    assert got["server"].startswith("refused"), got
    assert got["move"].startswith("exit 64"), got
    _board_untouched(root)


def test_a_person_outside_any_loop_still_writes(tmp_path):
    assert insider.evidence() is None  # pytest is no loop run
    root = _fleet(tmp_path, None)
    r = healer("board", "move", TICKET, "in_progress", "--root", str(root))
    assert r.returncode == 0, r.stderr


def test_the_runner_is_recognised_by_its_argv():
    assert insider.is_runner([PY, "-m", "healer", "loop", "run", "--policy", "p.yaml"])
    assert insider.is_runner(["/usr/local/bin/healer", "--debug", "loop", "run"])
    assert not insider.is_runner([PY, "-m", "healer", "board", "move", "T-1", "closed"])
    assert not insider.is_runner(["/usr/bin/python3", "loop", "run"])
