"""The fleet's configuration is the operator's (issue 39, item 1): `healer.yaml`, `.healer/`, the runbooks it
includes and every file it names as a command are guarded in every loop, refused in a merge, and a running fleet
launches its loops from the policy it was started with. Real repositories, the real dispatcher, `healer loop run`
and the sandbox; the hostile agent is chaos/agents/hostile.py `takeover`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml

from healer import git as hgit
from healer import guarded
from healer.clock import VirtualClock
from healer.fleet import proposals
from healer.fleet.dispatch_launch import snapshot_policy
from healer.policy.schema import Policy
from healer.records import Proposal
from tests.conftest import git, healer, make_repo
from tests.security.conftest import CHECK, HOSTILE, PY

GATE_SH = f"#!/bin/sh\nexec env PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {PY} -m pytest -q -p no:cacheprovider tests\n"
GATE = {"name": "check", "run": ["sh", "ci/gate.sh"], "timeout": "60s"}


def _operator_policy(mode: str, agent: list[str], **fleet) -> dict:
    return {"version": 1,
            "loop": {"max_iterations": 1, "iteration_timeout": "60s", "kill_grace": "1s", "sandbox": mode,
                     "agent": {"preset": "command", "command": agent}, "gates": [GATE]},
            "fleet": {"merge_gates": [GATE], "pool_size": 1, "dispatch_tick": "30s", **fleet},
            "notify": {"notifiers": []}}


def _fleet_repo(path: Path, pol: dict) -> Path:
    root = make_repo(path, {"README.md": "# task: solution.txt = 42\n", "tests/test_check.py": CHECK,
                            "ci/gate.sh": GATE_SH, "healer.yaml": yaml.safe_dump(pol)})
    (root / ".gitignore").write_text(".healer/\n__pycache__/\n.pytest_cache/\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "ignore caches")
    return root


def _proposal(root: Path, files: dict[str, str], forged: bool = True) -> Proposal:
    """A branch healer/T-1 with one commit that looks like the loop's (the trailer an unsandboxed agent can forge)."""
    git(root, "checkout", "-q", "-b", "healer/T-1")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git(root, "add", "-f", "--", *files)
    hgit.run(root, *hgit.IDENTITY, "commit", "-q", "-m", "loop: iteration 1\n\nHealer-Run: r1" if forged else "x")
    sha = git(root, "rev-parse", "HEAD")
    git(root, "checkout", "-q", "main")
    return Proposal(id=1, ticket_id="T-1", branch="healer/T-1", commit=sha, state="open", created_at=0.0)


TAKEN = "version: 1\nloop:\n  sandbox: none\n  protected_paths: []\n  gates: [{name: tests, run: ['true']}]\n"


def test_a_proposal_rewriting_the_fleets_policy_is_refused_with_its_reason(tmp_path):
    pol = _operator_policy("none", ["true"])
    root = _fleet_repo(tmp_path / "fleet", pol)
    prop = _proposal(root, {"solution.txt": "42\n", "healer.yaml": TAKEN})
    v = proposals.gate_proposal(root, Policy.model_validate(pol), prop, VirtualClock())
    assert v.outcome == proposals.REJECTED
    assert "healer.yaml (the fleet's configuration)" in v.log, v.log
    assert v.guarded and "healer.yaml" in v.guarded
    assert "protected_paths: []" not in git(root, "show", "main:healer.yaml")


def test_a_proposal_changing_a_gate_script_or_an_instruction_file_is_refused(tmp_path):
    pol = _operator_policy("none", ["true"])
    for name, text, why in (("ci/gate.sh", "#!/bin/sh\nexit 0\n", "the fleet's configuration"),
                            (".claude/settings.json", "{}", "an agent-instruction or tool-config file"),
                            (".healer/config.yaml", "x: 1\n", "the fleet's configuration")):
        root = _fleet_repo(tmp_path / name.replace("/", "_"), pol)
        prop = _proposal(root, {"solution.txt": "42\n", name: text})
        v = proposals.gate_proposal(root, Policy.model_validate(pol), prop, VirtualClock())
        assert v.outcome == proposals.REJECTED, (name, v.log)
        assert f"{name} ({why})" in v.log, v.log


def test_a_legitimate_change_elsewhere_still_merges(tmp_path):
    pol = _operator_policy("none", ["true"])
    root = _fleet_repo(tmp_path / "fleet", pol)
    prop = _proposal(root, {"solution.txt": "42\n", "src/app.py": "X = 1\n", "docs/notes.md": "fine\n"})
    v = proposals.gate_proposal(root, Policy.model_validate(pol), prop, VirtualClock())
    assert v.outcome == proposals.MERGED, v.log
    assert git(root, "show", "main:solution.txt") == "42"


FLEET_AGENT = """import os, subprocess, sys
from pathlib import Path
wd = Path(sys.argv[1])
if os.environ.get("HEALER_TICKET") == "T-1":
    subprocess.run([sys.executable, {hostile!r}, "takeover", {witness!r}], cwd=wd)
else:
    (wd / "solution.txt").write_text("42\\n")
    (wd / "t2.txt").write_text("two\\n")
"""


def test_a_takeover_of_the_fleets_policy_never_reaches_the_next_loop(tmp_path, mode):
    """T-1's agent answers right and takes the fleet over: healer.yaml (sandbox none, no protected path, a gate
    `true`), the gate script made `exit 0`, a healer.py that a `python -m healer` in the tree would run. Its loop
    puts the policy and the script back; the merge takes the answer (and healer.py) only. Then ROOT/healer.yaml is
    rewritten behind the running dispatcher: T-2's loop is still launched from the operator's snapshot (same gate,
    same sandbox) and the tree's healer.py never runs."""
    from healer.fleet.dispatcher import Dispatcher
    from healer.fleet.process_runtime import ProcessRuntime
    from healer.store import open_store

    witness = tmp_path / "witness"
    agent = tmp_path / "agent.py"
    agent.write_text(FLEET_AGENT.format(hostile=HOSTILE, witness=str(witness)))
    pol = _operator_policy(mode, [sys.executable, str(agent), "{workdir}"])
    root = _fleet_repo(tmp_path / "fleet", pol)
    store = open_store(root, VirtualClock())
    d = Dispatcher(root, Policy.model_validate(pol), store, VirtualClock(), ProcessRuntime(),
                   policy_path=root / "healer.yaml")
    try:
        store.add_ticket("answer", id="T-1", body="solution.txt = 42")
        assert d.tick().launched == [("T-1", "launch")]
        assert d.wait_idle(240)
        rep = d.tick()
        assert rep.merged == ["T-1"], store.tail(30)
        main_files = git(root, "ls-tree", "-r", "--name-only", "main").splitlines()
        assert "healer.py" in main_files  # not the fleet's: merged, and harmless to the next loop (below)
        assert git(root, "show", "main:healer.yaml") == yaml.safe_dump(pol).rstrip("\n")
        assert git(root, "show", "main:ci/gate.sh") + "\n" == GATE_SH
        rev = [e for e in store.events(prefix="loop.") if e.kind == "loop.protected_reverted"]
        assert {"healer.yaml", "ci/gate.sh"} <= {p for e in rev for p in e.payload["paths"]}, rev

        # behind the running dispatcher, the tree's policy changes (an unsandboxed agent, a merge, a typo)
        (root / "healer.yaml").write_text(TAKEN)
        store.add_ticket("second", id="T-2", body="solution.txt = 42")
        assert d.tick().launched == [("T-2", "launch")]
        assert d.wait_idle(240)
        started = [e for e in store.events(prefix="loop.") if e.kind == "loop.started" and "T-2" in e.subject]
        assert started and started[0].payload["gates"] == ["check"], started
        assert started[0].payload["sandbox"] == ("bwrap" if mode == "bwrap" else mode), started
        snap = Path(started[0].payload["policy"])
        assert snap.parent == root / ".healer" / "policies" and snap.stat().st_mode & 0o222 == 0
        assert [e for e in store.events(prefix="dispatch.") if e.kind == "dispatch.policy"]
        assert not witness.exists(), witness.read_text()
    finally:
        d.stop_agents()
        store.close()


def test_a_snapshot_changed_after_the_dispatcher_wrote_it_is_refused(tmp_path):
    repo = make_repo(tmp_path / "repo", {"README.md": "# x\n"})
    pol = _operator_policy("none", ["true"])
    path, fresh = snapshot_policy(repo, yaml.safe_dump(pol))
    assert fresh and path.name == f"{path.stem}.yaml" and len(path.stem) == 64
    assert snapshot_policy(repo, yaml.safe_dump(pol)) == (path, False)
    os.chmod(path, 0o644)
    path.write_text(TAKEN)
    task = tmp_path / "task.md"
    task.write_text("x\n")
    r = healer("loop", "run", "--policy", str(path), "--task", str(task), "--workdir", str(repo))
    assert r.returncode == 65, r.stderr
    assert "does not hash to its name" in r.stderr and "Traceback" not in r.stderr


def test_loop_run_without_policy_takes_only_the_committed_healer_yaml(tmp_path):
    """Without --policy the loop reads WORKDIR/healer.yaml only when it is HEAD's; another (an agent's, from a run
    killed before its loop put it back) is refused with one line (65) unless named with --policy."""
    pol = _operator_policy("none", [PY, "-c", "open('solution.txt', 'w').write('42')"])
    repo = _fleet_repo(tmp_path / "repo", pol)
    task = tmp_path / "task.md"
    task.write_text("solution.txt = 42\n")
    r = healer("loop", "run", "--task", str(task), "--workdir", str(repo), "--run-id", "a")
    assert r.returncode == 0, r.stdout + r.stderr
    (repo / "healer.yaml").write_text(TAKEN)
    r = healer("loop", "run", "--task", str(task), "--workdir", str(repo), "--run-id", "b", "--allow-dirty")
    assert r.returncode == 65 and "differs from the one committed at HEAD" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = healer("loop", "run", "--policy", str(repo / "healer.yaml"), "--task", str(task), "--workdir", str(repo),
               "--run-id", "c", "--allow-dirty")
    assert "committed" not in r.stderr, r.stderr  # named by the operator: taken as it is
    bare = make_repo(tmp_path / "bare", {"README.md": "# x\n"})
    (bare / "healer.yaml").write_text(yaml.safe_dump(pol))
    r = healer("loop", "run", "--task", str(task), "--workdir", str(bare), "--run-id", "d")
    assert r.returncode == 65 and "is not committed" in r.stderr, r.stderr


def test_the_guarded_set_is_derived_from_the_policy():
    pol = Policy.model_validate({
        "loop": {"gates": [{"name": "a", "run": ["./check.sh"]}, {"name": "b", "run": ["make", "-C", "sub", "test"]},
                           {"name": "c", "run": ["env", "X=1", "python3", "-m", "tools.gate"]},
                           {"name": "d", "run": ["mypy", "--config-file", "ci/mypy.ini", "src/app.py"]},
                           {"name": "e", "run": ["bash", "-c", "exit 0"]}]},
        "fleet": {"merge_gates": [{"name": "m", "run": ["{workdir}/ci/merge.sh"]}],
                  "loop_command": ["{python}", "-m", "healer", "loop", "run", "--policy", "{policy}"]},
        "notify": {"notifiers": [{"kind": "command", "command": ["sh", "notify/page.sh"]}]},
        "include_runbooks": ["runbooks", "extra/one.yaml"]}).model_dump(mode="json")
    got = guarded.config_paths(pol, "", "/work/fleet")
    for p in ("healer.yaml", ".healer/", "check.sh", "Makefile", "sub/Makefile", "tools/gate.py", "tools/__init__.py",
              "ci/mypy.ini", "ci/merge.sh", "notify/page.sh", "runbooks/", "extra/one.yaml"):
        assert p in got, (p, got)
    assert "src/app.py" not in got and "healer/" not in got and "healer.py" not in got  # input, and healer's own -P
    assert guarded.command_paths(["/work/fleet/ci/x.sh"], "/work/fleet") == ["ci/x.sh"]
    assert guarded.command_paths(["/usr/bin/true"], "/work/fleet") == []
    assert guarded.command_paths(["python", "-P", "-m", "pytest"]) == []
    assert guarded.command_paths(["python", "-m", "pytest"]) == ["pytest.py", "pytest/"]


RESUME_AGENT = """import sys
from pathlib import Path
Path("solution.txt").write_text("41\\n")
Path("healer.yaml").write_text({taken!r})
Path(".healer/STOP").write_text("")  # the run stops after this iteration (exit 4), resumable
"""


def test_a_resume_never_reads_the_policy_its_agent_wrote(tmp_path):
    """The agent rewrites healer.yaml and the run stops (exit 4); the tree's healer.yaml is then the agent's (as a
    runner killed before its check would leave it). `--resume` without --policy keeps the run's own rules (its
    gate `check`, not the agent's `true`) and puts the file back on resume."""
    agent = tmp_path / "agent.py"
    agent.write_text(RESUME_AGENT.format(taken=TAKEN))
    pol = _operator_policy("none", [PY, str(agent)])
    pol["loop"]["max_iterations"] = 3
    repo = _fleet_repo(tmp_path / "repo", pol)
    task = tmp_path / "task.md"
    task.write_text("solution.txt = 42\n")
    r = healer("loop", "run", "--task", str(task), "--workdir", str(repo), "--run-id", "r")
    assert r.returncode == 4, r.stdout + r.stderr
    assert (repo / "healer.yaml").read_text() == yaml.safe_dump(pol)  # put back after the agent's step
    (repo / "healer.yaml").write_text(TAKEN)
    (repo / ".healer" / "STOP").unlink()
    r = healer("loop", "run", "--resume", "r", "--workdir", str(repo))
    assert r.returncode == 4, r.stdout + r.stderr  # the gate still fails on 41: the agent's `true` never judged
    from healer.store import open_store

    s = open_store(repo)
    try:
        evs = s.events(prefix="loop.")
    finally:
        s.close()
    started = [e for e in evs if e.kind == "loop.started"]
    assert [e.payload["gates"] for e in started] == [["check"], ["check"]]
    resumed = [e for e in evs if e.kind == "loop.protected_reverted" and e.payload.get("why") == "resume"]
    assert resumed and "healer.yaml" in resumed[0].payload["paths"], evs
    assert (repo / "healer.yaml").read_text() == yaml.safe_dump(pol)
