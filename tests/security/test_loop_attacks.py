"""Each attack of issue 11 by a hostile agent, under bubblewrap and unsandboxed: the protected
test stays intact in HEAD and in the tree, no hook runs, nothing outside is written (bwrap) or
every outside write is reported (none), and the loop ends with a decision, never 70."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import git
from tests.security.conftest import CHECK, assert_contained, events, policy, run, target_repo


def test_hooks_never_run_and_are_undone(tmp_path, mode):
    repo = target_repo(tmp_path / "repo")
    witness = tmp_path / "witness"
    out, _ = run(repo, policy(mode, "hook", str(witness)))
    assert_contained(repo, out)
    assert not witness.exists()
    hooks = repo / ".git" / "hooks"
    assert not (hooks / "pre-commit").exists()
    assert "hooksPath" not in (repo / ".git" / "config").read_text()
    if mode == "none":
        t = events(repo, "loop.git_tampered")
        assert t and any(p.endswith("hooks/pre-commit") for p in t[0].payload["paths"])


def test_config_programs_never_run(tmp_path, mode):
    repo = target_repo(tmp_path / "repo")
    witness = tmp_path / "witness"
    out, _ = run(repo, policy(mode, "config", str(witness)))
    assert_contained(repo, out)
    assert not witness.exists()
    assert "fsmonitor" not in (repo / ".git" / "config").read_text()


def test_symlink_swap_of_protected_folder(tmp_path, mode):
    repo = target_repo(tmp_path / "repo")
    elsewhere = tmp_path / "elsewhere"
    out, _ = run(repo, policy(mode, "symlink", str(elsewhere)))
    assert_contained(repo, out)
    moved = events(repo, "loop.protected_reverted")
    assert moved and "tests" in moved[0].payload["paths"]
    if mode == "none":  # the link was moved away as a link: what it pointed at is untouched
        assert (elsewhere / "test_check.py").read_text().startswith("def test_ok")


def test_protected_file_swapped_for_a_link_outside(tmp_path, mode):
    repo = target_repo(tmp_path / "repo")
    target = tmp_path / "gutted.py"
    out, _ = run(repo, policy(mode, "filelink", str(target)))
    assert_contained(repo, out)
    assert not (repo / "tests" / "test_check.py").is_symlink()
    if mode == "none":  # the link went to quarantine as a link; its target was neither moved nor written
        assert target.read_text().startswith("def test_ok")


def test_agent_commits_gutted_tests_itself(tmp_path, mode):
    repo = target_repo(tmp_path / "repo")
    out, _ = run(repo, policy(mode, "commit"))
    assert out.exit_code not in (0, 70)
    assert (repo / "tests" / "test_check.py").read_text() == CHECK


def test_gate_time_gutting_refused_at_commit(tmp_path, mode):
    """Code a gate runs guts the test while the gates run: green gates, but the commit is refused (exit 3). The gate
    here imports the agent's root conftest.py itself (a pytest gate would not run at all: a conftest.py the base
    does not have fails it unrun, test_gate_cheats.py), then runs pytest on what it left."""
    from tests.security.conftest import PY

    repo = target_repo(tmp_path / "repo")
    gate = [PY, "-c", "import conftest, subprocess, sys; sys.exit(subprocess.call(['env', "
                      "'PYTEST_DISABLE_PLUGIN_AUTOLOAD=1', sys.executable, '-m', 'pytest', '-q', '-p', "
                      "'no:cacheprovider', 'tests']))"]
    out, _ = run(repo, policy(mode, "gate", gates=[{"name": "tests", "run": gate, "timeout": "60s"}]))
    assert out.exit_code == 3, out
    assert git(repo, "show", "HEAD:tests/test_check.py") + "\n" == CHECK
    refused = events(repo, "loop.commit_refused")
    assert refused and refused[0].payload["paths"] == ["tests/test_check.py"]


def test_outside_writes_blocked_or_reported(tmp_path, mode, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    repo = target_repo(tmp_path / "repo")
    beside, in_home = tmp_path / "beside.txt", home / "pwned.txt"
    in_git = repo / ".git" / "info" / "pwned"
    out, _ = run(repo, policy(mode, "outside", str(beside), str(in_home), str(in_git), "/tmp/../" + str(beside)))
    assert_contained(repo, out)
    if mode != "none":  # bwrap, container: refused by the kernel
        assert not beside.exists() and not in_home.exists() and not in_git.exists()
    else:
        seen = {p for e in events(repo, "loop.outside_write") for p in e.payload["paths"]}
        assert {str(beside), str(in_home), str(in_git)} <= seen, seen
        assert not in_git.exists()  # the git dir's change is undone (quarantined)


def test_foreign_refs_undone(tmp_path, mode):
    repo = target_repo(tmp_path / "repo")
    git(repo, "branch", "other")
    git(repo, "checkout", "-q", "-b", "work")
    other = git(repo, "rev-parse", "other")
    (repo / "x.txt").write_text("x\n")
    git(repo, "add", "x.txt")
    git(repo, "commit", "-q", "-m", "work moves on")
    out, _ = run(repo, policy(mode, "refs"))
    assert_contained(repo, out)
    assert git(repo, "rev-parse", "other") == other
    assert git(repo, "for-each-ref", "refs/heads/evil", "refs/tags/evil") == ""


def test_binary_blob_counts_by_size(tmp_path, mode):
    repo = target_repo(tmp_path / "repo")
    out, _ = run(repo, policy(mode, "blob", "2", max_diff_bytes=1_000_000))
    assert out.exit_code not in (0, 70)
    drift = events(repo, "loop.scope_drift")
    assert drift and drift[0].payload["diff_bytes"] > 1_000_000
    assert not (repo / "blob.bin").exists()


def test_dirty_tree_refused_then_user_work_never_committed(tmp_path, mode):
    from healer.errors import InvalidInput

    repo = target_repo(tmp_path / "repo")
    (repo / "README.md").write_text("user's own edit\n")
    (repo / "user.txt").write_text("user's staged file\n")
    git(repo, "add", "user.txt")
    try:
        run(repo, policy(mode, "outside", str(tmp_path / "x")))
        raise AssertionError("a dirty tree must be refused")
    except InvalidInput as e:
        assert "README.md" in str(e) and "user.txt" in str(e)
    # with --allow-dirty a converging agent commits only its own change
    conv = Path(__file__).resolve().parents[2] / "chaos" / "agents" / "loop_converge.py"
    from tests.security.conftest import PY

    pol = policy(mode, "x", agent={"command": [PY, str(conv), "{iteration}"]},
                 gates=[{"name": "steps", "run": [PY, str(conv.parent / "loop_gate.py"), "steps", "1"]}])
    out, _ = run(repo, pol, run_id="dirty", allow_dirty=True)
    assert out.exit_code == 0, out
    files = git(repo, "show", "--name-only", "--format=", "HEAD").split()
    assert files == ["work/step_1.txt"]
    assert "user.txt" in git(repo, "diff", "--cached", "--name-only")
    assert (repo / "README.md").read_text() == "user's own edit\n"


def test_wiping_the_loops_own_folder_is_no_internal_error(tmp_path, mode):
    repo = target_repo(tmp_path / "repo")
    out, _ = run(repo, policy(mode, "wipe", max_iterations=2))
    assert_contained(repo, out)
    assert out.result_path.exists()


def test_the_loops_own_files_swapped_for_links_redirect_nothing(tmp_path, mode):
    """progress.md as a link to a file outside: healer (outside the sandbox) must not append to it;
    lessons.md as a link to a secret: its text must not reach the prompt. Both links are set aside
    (quarantined, not deleted) and the files begin anew; a FIFO in the tree blocks nothing."""
    repo = target_repo(tmp_path / "repo")
    target, secret = tmp_path / "crontab", tmp_path / "secret"
    target.write_text("# a file healer can write and the agent cannot\n")
    secret.write_text("TOKEN-9f2c\n")
    out, _ = run(repo, policy(mode, "ownlink", str(target), str(secret), max_iterations=2))
    assert out.exit_code not in (0, 70), out
    assert target.read_text() == "# a file healer can write and the agent cannot\n"
    assert not (repo / "progress.md").is_symlink() and "## iteration 2" in (repo / "progress.md").read_text()
    prompts = sorted((repo / ".healer" / "runs" / "attack").glob("iter-*/prompt.md"))
    assert len(prompts) == 2 and not any("TOKEN-9f2c" in p.read_text() for p in prompts)
    aside = events(repo, "loop.own_file_set_aside")
    assert aside and aside[0].payload["file"] == "progress.md" and str(target) in aside[0].payload["was"]
    assert Path(aside[0].payload["saved_as"]).is_symlink()  # moved as a link, nothing deleted


def test_a_conftest_hidden_by_gitignore_under_a_protected_path_is_reverted(tmp_path, mode):
    """tests/conftest.py that skips every test, plus the .gitignore line that hides it from git: no diff shows
    it and the commit would not hold it, but the gates would load it (the loop used to commit 41 as the
    answer). The protected paths are compared on disk too: it is quarantined before the gates run."""
    repo = target_repo(tmp_path / "repo")
    out, _ = run(repo, policy(mode, "ignored", max_iterations=2))
    assert_contained(repo, out)
    rev = events(repo, "loop.protected_reverted")
    assert rev and "tests/conftest.py" in rev[0].payload["paths"]
    assert not (repo / "tests" / "conftest.py").exists()


def test_the_sandbox_holds_no_privilege_to_undo_itself(tmp_path, mode):
    """A runner started as root: bubblewrap keeps every capability for a root caller unless told otherwise,
    so its agent could unmount the read-only binds, remount / writable and trace the runner. The sandbox
    drops them all, whoever starts it."""
    if mode == "none":
        pytest.skip(reason="unsandboxed: the agent has the runner's rights by definition (docs/security.md)")
    repo = target_repo(tmp_path / "repo")
    witness = tmp_path / "witness"
    out, _ = run(repo, policy(mode, "privileged", str(witness)))
    assert_contained(repo, out)
    said = (repo / ".healer" / "runs" / "attack" / "iter-001" / "agent.out").read_text()
    assert "CapEff 0000000000000000" in said, said
    assert "umount" in said and "remount / writable: refused" in said, said
    assert not witness.exists(), said
    assert not Path(f"{witness}.ptrace").exists(), said
    assert not (repo / ".git" / "hooks" / "pre-commit").exists(), said


def test_a_hidden_conftest_planted_before_the_runner_is_killed_is_found_on_resume(tmp_path, mode):
    """The runner SIGKILLed right after the agent's step, before it compared the protected paths on disk: the
    agent's hidden tests/conftest.py stays, and the redone iteration (an agent that plants it once) changes
    nothing there, so only what the disk held before the killed step can tell. The resume compares with it."""
    import yaml

    from tests.loop.conftest import run_loop_cli

    repo = target_repo(tmp_path / "repo")
    pol = policy(mode, "ignored_once", max_iterations=2)
    pfile = tmp_path / "policy.yaml"
    pfile.write_text(yaml.safe_dump({"version": 1, "loop": pol.loop.model_dump(mode="json")}))
    cp = run_loop_cli(repo, pfile, "--run-id", "killed", env={"HEALER_FAILPOINTS": "loop.after_agent=kill"})
    assert cp.returncode == -9, cp.stdout + cp.stderr
    assert (repo / "tests" / "conftest.py").exists()  # planted, and nothing compared it yet
    out, _ = run(repo, pol, run_id="killed", resume=True)
    assert_contained(repo, out)
    rev = events(repo, "loop.protected_reverted")
    assert rev and "tests/conftest.py" in rev[0].payload["paths"], rev
    assert not (repo / "tests" / "conftest.py").exists()


def test_the_branch_made_a_link_to_another_ref_moves_neither(tmp_path, mode):
    """The agent gives the right answer and makes its own branch's ref `ref: refs/heads/victim`: healer's
    commit through HEAD would follow the link and move `victim` (in a fleet: main). The guard sets the branch
    back to an id after the step, so the commit lands on the run's branch and `victim` stays."""
    repo = target_repo(tmp_path / "repo")
    git(repo, "checkout", "-q", "-b", "work")
    git(repo, "branch", "victim")
    victim = git(repo, "rev-parse", "victim")
    out, _ = run(repo, policy(mode, "symref", "refs/heads/victim"))
    said = (repo / ".healer" / "runs" / "attack" / "iter-001" / "agent.out").read_text()
    assert "-> refs/heads/victim: done" in said, said  # the attack itself worked in every mode
    assert out.exit_code == 0, out
    assert git(repo, "rev-parse", "victim") == victim
    assert not (repo / ".git" / "refs" / "heads" / "work").read_text().startswith("ref:")
    assert git(repo, "show", "work:solution.txt") == "42"
    tampered = events(repo, "loop.git_tampered")
    assert tampered and any(u.get("ref") == "refs/heads/work" for u in tampered[0].payload["undone"])


def test_a_branch_link_made_before_the_runner_is_killed_moves_nothing_on_resume(tmp_path, mode):
    """The runner SIGKILLed right after the agent linked its branch to `victim`: the resumed run's first snapshot
    already holds the link, so the id to set the branch back to is the one the link leads to. `victim` stays."""
    import yaml

    from tests.loop.conftest import run_loop_cli

    repo = target_repo(tmp_path / "repo")
    git(repo, "checkout", "-q", "-b", "work")
    git(repo, "branch", "victim")
    victim = git(repo, "rev-parse", "victim")
    pol = policy(mode, "symref", "refs/heads/victim", max_iterations=2)
    pfile = tmp_path / "policy.yaml"
    pfile.write_text(yaml.safe_dump({"version": 1, "loop": pol.loop.model_dump(mode="json")}))
    cp = run_loop_cli(repo, pfile, "--run-id", "killed", env={"HEALER_FAILPOINTS": "loop.after_agent=kill"})
    assert cp.returncode == -9, cp.stdout + cp.stderr
    assert (repo / ".git" / "refs" / "heads" / "work").read_text().startswith("ref:")  # linked, not compared yet
    out, _ = run(repo, pol, run_id="killed", resume=True)
    assert out.exit_code == 0, out
    assert git(repo, "rev-parse", "victim") == victim
    assert not (repo / ".git" / "refs" / "heads" / "work").read_text().startswith("ref:")
    assert git(repo, "show", "work:solution.txt") == "42"


def test_another_branch_made_a_link_is_set_back_to_its_id(tmp_path, mode):
    """Another branch (`victim`) made a link to the run's branch: every commit on the run's branch would move it
    too. The guard writes it back as the id it held, without following the link."""
    repo = target_repo(tmp_path / "repo")
    git(repo, "checkout", "-q", "-b", "work")
    git(repo, "branch", "victim")
    victim = git(repo, "rev-parse", "victim")
    out, _ = run(repo, policy(mode, "symref", "refs/heads/work", "refs/heads/victim"))
    assert out.exit_code == 0, out
    assert (repo / ".git" / "refs" / "heads" / "victim").read_text().strip() == victim
    assert git(repo, "show", "work:solution.txt") == "42"


@pytest.mark.parametrize("flag", ["--assume-unchanged", "--skip-worktree"])
@pytest.mark.parametrize("gone", [None, "gone"])
def test_an_index_flag_does_not_hide_a_gutted_or_deleted_protected_test(tmp_path, mode, flag, gone):
    """The agent guts (or deletes) the protected test and sets FLAG on it in its own index: git's `add -A` keeps
    the old blob, so neither the diff nor the tree shows it, and the gates would run the gutted test. The snapshot
    clears the flag of a file on disk, and the protected paths are compared with the tree by content."""
    repo = target_repo(tmp_path / "repo")
    out, _ = run(repo, policy(mode, "flagged", flag, *([gone] if gone else [])))
    assert_contained(repo, out)
    rev = events(repo, "loop.protected_reverted")
    assert rev and "tests/test_check.py" in rev[0].payload["paths"], rev


def test_a_forged_object_never_reaches_the_repositorys_store(tmp_path, mode):
    """The agent rewrites the loose object of the protected test under its own id (git never checks a loose
    object's content when it reads it: every later checkout would read the gutted test). The repository's
    store is read-only in the sandbox; what the agent's own git writes is adopted only when its content hashes
    to its name, so the forgery it wrote there is set aside (loop.git_tampered), never stored."""
    if mode == "none":
        pytest.skip(reason="unsandboxed: the agent can write the object store (docs/security.md, known limits)")
    repo = target_repo(tmp_path / "repo")
    oid = git(repo, "rev-parse", "HEAD:tests/test_check.py")
    out, _ = run(repo, policy(mode, "forge"))
    assert_contained(repo, out)
    said = (repo / ".healer" / "runs" / "attack" / "iter-001" / "agent.out").read_text()
    assert f"refused {repo / '.git' / 'objects' / oid[:2] / oid[2:]}" in said, said
    assert git(repo, "cat-file", "blob", oid) + "\n" == CHECK
    assert git(repo, "fsck", "--no-dangling") == ""
    t = [e for e in events(repo, "loop.git_tampered") if e.payload.get("phase") == "objects"]
    assert t and t[0].payload["paths"] == [f"objects/{oid[:2]}/{oid[2:]}"], t


def test_a_nested_repository_without_a_commit_is_a_decision_not_an_internal_error(tmp_path, mode):
    """git cannot add a nested repository that has no commit: the snapshot leaves it out, the loop goes on to its
    gates (the wrong answer fails them) and ends with a decision, never 70."""
    repo = target_repo(tmp_path / "repo")
    out, _ = run(repo, policy(mode, "nested"))
    assert_contained(repo, out)
    assert (repo / "vendor" / "lib" / "lib.py").exists()  # the agent's folder is left where it is
