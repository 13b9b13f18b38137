"""No hook and no program configured in the repository ever runs in a git command healer runs.

The repository is armed the way an agent would arm it: every hook, a filter, fsmonitor,
an external diff, a textconv, a merge driver and commit signing, each writing a line to a
witness file when it runs. Then healer's own paths run: the loop's commit, the fleet's
proposal merge, worktree creation, a game day's git. The witness stays empty.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from healer import git
from healer.clock import VirtualClock
from healer.fleet import proposals
from healer.loop import gitops, worktree
from healer.policy.schema import Policy
from healer.records import Proposal
from tests.conftest import git as sh_git
from tests.conftest import make_repo

HOOKS = ("pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "pre-merge-commit", "post-merge",
         "post-checkout", "reference-transaction", "post-index-change", "pre-auto-gc", "post-rewrite")


def arm(repo: Path, witness: Path) -> None:
    common = Path(sh_git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    hooks = common / "hooks"
    hooks.mkdir(exist_ok=True)
    for h in HOOKS:
        f = hooks / h
        # the hook also guts the tests, as the attacker did
        f.write_text(f"#!/bin/sh\necho hook:{h} >> {witness}\necho \"print('ok')\" > tests/check.py 2>/dev/null\n"
                     "git add tests/check.py 2>/dev/null\nexit 0\n")
        f.chmod(f.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    cmd = f"sh -c 'echo {{}} >> {witness}; cat'"
    for key, what in [("filter.evil.clean", "clean"), ("filter.evil.smudge", "smudge"),
                      ("filter.evil.process", "process"), ("core.fsmonitor", "fsmonitor"),
                      ("diff.external", "external"), ("diff.evil.textconv", "textconv"),
                      ("diff.evil.command", "diffcmd"), ("merge.evil.driver", "merge"),
                      ("gpg.program", "gpg"), ("core.pager", "pager")]:
        sh_git(repo, "config", key, cmd.replace("{}", what))
    sh_git(repo, "config", "filter.evil.required", "true")
    sh_git(repo, "config", "commit.gpgSign", "true")
    sh_git(repo, "config", "core.hooksPath", str(hooks))


def test_loop_commit_and_fleet_merge_run_no_repository_program(tmp_path):
    witness = tmp_path / "witness"
    repo = make_repo(tmp_path / "r", {"README.md": "x\n", "tests/check.py": "assert 1 + 1 == 2\n", "f.txt": "base\n"})
    (repo / ".gitattributes").write_text("* filter=evil diff=evil merge=evil\n")
    sh_git(repo, "add", "-A")
    sh_git(repo, "commit", "-q", "-m", "attributes")
    arm(repo, witness)

    # the fleet's worktree and the loop's commit in it
    wt = tmp_path / "wt"
    git.add_worktree(repo, wt, "healer/T1", "main")
    (wt / "f.txt").write_text("side\n")
    worktree.snapshot(wt)
    sha = gitops.commit_all(wt, "loop: goal reached at iteration 1\n\nHealer-Run: r1")
    assert sha
    assert git.run(wt, "show", f"{sha}:tests/check.py").stdout == "assert 1 + 1 == 2"
    assert git.run(wt, "diff", "HEAD~1", "HEAD").code == 0

    # main moves on the same line: the proposal merge needs the (repository's) merge driver
    (repo / "f.txt").write_text("main\n")
    git.run(repo, *git.IDENTITY, "commit", "-q", "-a", "-m", "main moves")
    policy = Policy.model_validate({"version": 1, "fleet": {"merge_gates": []}})
    v = proposals.gate_proposal(repo, policy, Proposal(id=1, ticket_id="T1", branch="healer/T1", commit=sha,
                                                       state="open", created_at=0.0), VirtualClock())
    # the repository's merge driver never ran: its paths conflict, the proposal is rejected
    assert v.outcome == proposals.REJECTED
    assert not witness.exists(), witness.read_text()
    assert (repo / "tests" / "check.py").read_text() == "assert 1 + 1 == 2\n"
    # control: the same repository does run them for a plain git (the arming is real)
    subprocess.run(["git", "status"], cwd=repo, capture_output=True)
    assert "fsmonitor" in witness.read_text()


@pytest.mark.parametrize("where", [".gitconfig", ".config/git/config", "xdg", "system"])
def test_no_user_or_system_config_is_read(tmp_path, monkeypatch, where):
    """Issue 31: a driver, attribute or identity from the user's global, XDG or system config never reaches
    healer's git (an unsandboxed agent can write them): the filter does not run, the commit is healer's."""
    home = tmp_path / "home"
    home.mkdir()
    seen = tmp_path / "seen"
    script = tmp_path / "clean.sh"
    script.write_text(f"#!/bin/sh\necho clean >> {seen}\ncat\n")
    script.chmod(0o755)
    text = f"[filter \"lfsish\"]\n\tclean = {script}\n[core]\n\tattributesFile = {tmp_path / 'attrs'}\n"
    (tmp_path / "attrs").write_text("*.bin filter=lfsish\n")
    cfg = {"xdg": tmp_path / "xdg" / "git" / "config", "system": tmp_path / "sys.cfg"}.get(where, home / where)
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(text)
    (cfg.parent / "attributes").write_text("*.bin filter=lfsish\n")
    monkeypatch.setenv("HOME", str(home))
    if where == "xdg":
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    if where == "system":
        monkeypatch.setenv("GIT_CONFIG_SYSTEM", str(cfg))
    repo = make_repo(tmp_path / "r")
    (repo / "a.bin").write_text("x\n")
    git.run(repo, "add", "-A")
    assert not seen.exists()
    # a plain git as the agent would run it: whatever a neighbour left in this worker's environment that switches
    # config files off (GIT_CONFIG_NOSYSTEM, GIT_ATTR_NOSYSTEM, GIT_CONFIG_GLOBAL) is not the agent's
    plain = {k: v for k, v in os.environ.items() if k not in ("GIT_CONFIG_NOSYSTEM", "GIT_ATTR_NOSYSTEM", "GIT_CONFIG_GLOBAL")}
    assert subprocess.run(["git", "add", "-A"], cwd=repo, capture_output=True, env=plain).returncode == 0
    assert seen.exists()  # the same files, read by a plain git: the attack was in place


def test_environment_programs_dropped(tmp_path, monkeypatch):
    witness = tmp_path / "w"
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", f"sh -c 'echo ext >> {witness}'")
    repo = make_repo(tmp_path / "r")
    (repo / "README.md").write_text("changed\n")
    git.run(repo, "diff")
    assert not witness.exists()
    assert "GIT_EXTERNAL_DIFF" in os.environ


def _overrides_afresh(repo: Path) -> tuple[str, ...]:
    git._driver_cache.clear()
    return git.driver_overrides(repo)


def test_drivers_reached_through_an_include_or_any_case_are_still_disabled(tmp_path):
    """The config files are only read to skip `git config --list` when no driver can be named in them:
    a driver behind an include, or written in capitals, is still found (git is asked) and disabled."""
    repo = make_repo(tmp_path / "r")
    common = Path(sh_git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    assert _overrides_afresh(repo) == ()  # nothing in the config can name a driver: no git process needed
    (common / "extra.cfg").write_text('[filter "evil"]\n\tclean = sh -c "echo ran"\n')
    sh_git(repo, "config", "include.path", "extra.cfg")
    assert "filter.evil.clean=" in _overrides_afresh(repo)
    sh_git(repo, "config", "--unset", "include.path")
    assert _overrides_afresh(repo) == ()
    with open(common / "config", "a") as f:
        f.write('[DIFF "Evil"]\n\ttextconv = sh -c "echo ran"\n[Merge "x"]\n\tdriver = sh -c "echo ran"\n')
    over = _overrides_afresh(repo)
    assert "diff.Evil.textconv=" in over and "merge.x.driver=false" in over


def test_no_config_process_when_the_config_cannot_name_a_driver(tmp_path, monkeypatch):
    repo = make_repo(tmp_path / "r")
    ran: list[list[str]] = []
    real = subprocess.run
    monkeypatch.setattr(git.subprocess, "run", lambda argv, *a, **k: ran.append(list(argv)) or real(argv, *a, **k))
    assert _overrides_afresh(repo) == ()
    assert not [a for a in ran if "config" in a], ran


def test_a_clean_filter_in_the_users_xdg_config_hides_nothing(tmp_path, mode, monkeypatch):
    """Issue 31 #4: under `none` the agent writes ~/.config/git/{config,attributes}: a clean filter that would make
    `git add` store the intact test while the gates run a gutted one. healer's git reads no user config: the
    gutted test is seen, reverted, and the filter never runs (under bwrap $HOME is read-only anyway)."""
    from tests.security.conftest import CHECK, assert_contained, events, policy, run, target_repo

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    repo = target_repo(tmp_path / "repo")
    witness = tmp_path / "filter-ran"
    out, _ = run(repo, policy(mode, "xdg", str(witness)))
    assert_contained(repo, out)
    assert not witness.exists()
    assert (repo / "tests" / "test_check.py").read_text() == CHECK
    if mode == "none":
        assert (home / ".config" / "git" / "attributes").exists()  # the attack was in place
        assert any("tests/test_check.py" in e.payload["paths"] for e in events(repo, "loop.protected_reverted"))
