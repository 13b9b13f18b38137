"""History hygiene (issue 31): the agent's commits never reach a branch. The loop commits the final tree on the
run's base as its only parent, as healer, with its trailers; what the agent committed is kept under
refs/healer/quarantine/<run>/<n>/agent and reported (`loop.agent_commits`); refs it moved are put back.
Real git, the real sandbox, hostile agents of chaos/agents/hostile.py."""

from __future__ import annotations

import pytest

from tests.conftest import git
from tests.security.conftest import CHECK, assert_contained, events, policy, run, target_repo


def _commit(repo, sha: str) -> tuple[list[str], str, str]:
    """(parents, author, message) of `sha`."""
    parents = git(repo, "log", "-1", "--format=%P", sha).split()
    return parents, git(repo, "log", "-1", "--format=%an <%ae>", sha), git(repo, "log", "-1", "--format=%B", sha)


def test_an_agent_that_commits_the_converging_change_exits_0_with_one_healer_commit(tmp_path, mode):
    """The real Claude Code and Codex commit by themselves: the normal case, not an attack."""
    repo = target_repo(tmp_path / "repo")
    base = git(repo, "rev-parse", "HEAD")
    out, _ = run(repo, policy(mode, "selfcommit"))
    assert out.exit_code == 0, out
    head = git(repo, "rev-parse", "HEAD")
    parents, author, msg = _commit(repo, head)
    assert parents == [base]  # exactly one commit on the base, healer's
    assert author == "healer <healer@localhost>"
    assert "Healer-Run: attack" in msg and f"Healer-Base: {base}" in msg
    assert git(repo, "show", "HEAD:solution.txt") == "42"
    ev = events(repo, "loop.agent_commits")
    assert ev and ev[0].payload["moved_back"] and ev[0].payload["to"] == base
    kept = git(repo, "rev-parse", "refs/healer/quarantine/attack/1/agent")
    assert _commit(repo, kept)[2].startswith("solve it")  # the agent's commit, kept for audit
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""


def test_a_forged_security_team_commit_never_stays_on_the_branch(tmp_path, mode):
    repo = target_repo(tmp_path / "repo")
    base = git(repo, "rev-parse", "HEAD")
    out, _ = run(repo, policy(mode, "forged"))
    assert_contained(repo, out)
    assert git(repo, "rev-parse", "HEAD") == base
    assert "Security Team" not in git(repo, "log", "--format=%an", "main")
    ev = events(repo, "loop.agent_commits")
    assert ev and ev[0].payload["commits"][0]["subject"] == "security: harden check"
    kept = git(repo, "rev-parse", "refs/healer/quarantine/attack/1/agent")
    assert "backdoor.sh" in git(repo, "ls-tree", "--name-only", kept)


def test_main_and_remote_refs_the_agent_moved_are_put_back(tmp_path, mode):
    repo = target_repo(tmp_path / "repo")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "update-ref", "refs/remotes/origin/main", base)
    for also in ("main", "remote"):
        wt = tmp_path / f"wt-{also}"
        git(repo, "worktree", "add", "-q", "-b", f"work-{also}", str(wt))
        out, _ = run(wt, policy(mode, "forged", also), run_id=f"attack-{also}")
        assert out.exit_code not in (0, 70), out
        assert git(repo, "rev-parse", "refs/heads/main") == base
        assert git(repo, "rev-parse", "refs/remotes/origin/main") == base
        assert git(repo, "rev-parse", f"refs/heads/work-{also}") == base
        assert (wt / "tests" / "test_check.py").read_text() == CHECK


@pytest.mark.parametrize("allow_dirty", [False, True])
def test_a_later_run_never_commits_on_top_of_an_agents_gutting_commit(tmp_path, mode, allow_dirty):
    """The first run exits 3 after its agent committed gutted tests; the next one (with the --allow-dirty that
    healer's message suggests, or not) commits on the original base, the test intact."""
    repo = target_repo(tmp_path / "repo")
    base = git(repo, "rev-parse", "HEAD")
    out, _ = run(repo, policy(mode, "commit"), run_id="first")
    assert out.exit_code not in (0, 70), out
    assert git(repo, "rev-parse", "HEAD") == base
    out, _ = run(repo, policy(mode, "selfcommit"), run_id="second", allow_dirty=allow_dirty)
    assert out.exit_code == 0, out
    assert _commit(repo, "HEAD")[0] == [base]
    assert git(repo, "show", "HEAD:tests/test_check.py") + "\n" == CHECK
    assert all(a == "healer" or s == "initial" or s == "ignore caches" for a, s in
               (line.split("\x1f") for line in git(repo, "log", "--format=%an\x1f%s").splitlines()))


FLEET_AGENT = """
import pathlib, subprocess, sys
wd = pathlib.Path(sys.argv[1])
if wd.name == "T-1":  # the hostile one: a forged, reviewed-looking commit with a backdoor, and main moved to it
    subprocess.run([sys.executable, {hostile!r}, "forged", "main"], cwd=wd)
else:  # the benign neighbour: the right answer, committed by itself as the real CLIs do
    subprocess.run([sys.executable, {hostile!r}, "selfcommit"], cwd=wd)
"""


def test_a_fleet_of_two_merges_nothing_of_the_attack_and_the_neighbour_finishes(tmp_path, mode):
    """Two tickets through the real dispatcher and `healer loop run`: T-1's agent forges a "Security Team" commit
    (backdoor.sh, a gutted test) and moves main to it; T-2's agent commits the right answer itself. Nothing of
    T-1 reaches main, T-2 is merged, and T-2's loop reports no git tampering (the dispatcher's merges, the
    scratch worktrees and T-1's branch are healer's own)."""
    import sys

    from healer.fleet.dispatcher import Dispatcher
    from healer.fleet.process_runtime import ProcessRuntime
    from healer.policy.schema import Policy
    from healer.store import open_store
    from tests.security.conftest import HOSTILE, PY

    root = target_repo(tmp_path / "fleet")
    base = git(root, "rev-parse", "main")
    agent = tmp_path / "agent.py"
    agent.write_text(FLEET_AGENT.format(hostile=HOSTILE))
    gate = {"name": "tests", "run": ["env", "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1", PY, "-m", "pytest", "-q", "-p",
                                     "no:cacheprovider", "tests"], "timeout": "60s"}
    policy = Policy.model_validate({
        "loop": {"max_iterations": 1, "iteration_timeout": "60s", "kill_grace": "1s", "sandbox": mode,
                 "agent": {"preset": "command", "command": [sys.executable, str(agent), "{workdir}"]}, "gates": [gate]},
        "fleet": {"merge_gates": [gate], "pool_size": 2, "dispatch_tick": "30s"},
        "notify": {"notifiers": []}})
    from healer.clock import VirtualClock

    store = open_store(root, VirtualClock())
    d = Dispatcher(root, policy, store, VirtualClock(), ProcessRuntime())
    try:
        store.add_ticket("answer", id="T-1", body="solution.txt = 42")
        store.add_ticket("answer", id="T-2", body="solution.txt = 42")
        assert sorted(d.tick().launched) == [("T-1", "launch"), ("T-2", "launch")]
        assert d.wait_idle(240)
        rep = d.tick()
        assert rep.merged == ["T-2"], store.tail(30)
        main = git(root, "rev-parse", "main")
        assert git(root, "merge-base", "--is-ancestor", base, main) == ""
        assert "Security Team" not in git(root, "log", "--format=%an%n%B", "main")
        assert "backdoor.sh" not in git(root, "ls-tree", "-r", "--name-only", "main")
        assert git(root, "show", "main:tests/test_check.py") + "\n" == CHECK
        assert git(root, "show", "main:solution.txt") == "42"
        assert store.ticket("T-2").state == "done" and store.ticket("T-1").state != "done"
        evs = [e for e in store.events(prefix="loop.")]
        # the benign neighbour never reports healer's own moves (merges, T-1's branch, scratch worktrees); unsandboxed
        # it may see T-1's agent move main while its own step runs (the same repository), and puts it back too
        theirs = [e for e in evs if e.kind == "loop.git_tampered" and "T-2" in e.subject]
        assert not theirs if mode != "none" else all(set(e.payload["refs"]) <= {"refs/heads/main"} and not
                                                     [p for p in e.payload["paths"] if p != "refs/heads/main"]
                                                     for e in theirs), theirs
        assert any(e.kind == "loop.agent_commits" and "T-1" in e.subject for e in evs)
        assert any("T-2" in e.subject for e in evs)  # the subjects name the ticket
        assert "Security Team" not in git(root, "log", "--format=%an", "healer/T-1")
    finally:
        d.stop_agents()
        store.close()


def test_in_a_fleet_the_dispatchers_merges_are_not_tampering_but_an_agents_move_of_main_is(tmp_path):
    """The guard's view of main in a fleet: advanced by two merges of the dispatcher during one agent step (first
    parents back to the old main, each naming its ticket) is healer's own; moved to any other commit is not."""
    from pathlib import Path

    from healer.loop import guard

    repo = target_repo(tmp_path / "repo")
    base = git(repo, "rev-parse", "HEAD")
    tree = git(repo, "rev-parse", "HEAD^{tree}")

    def commit(msg: str, *parents: str) -> str:
        return git(repo, "commit-tree", tree, "-m", msg, *[a for p in parents for a in ("-p", p)])

    side = commit("loop work\n\nHealer-Run: r", base)
    m1 = commit("healer: merge healer/T-1 (T-1)\n\nHealer-Ticket: T-1", base, side)
    m2 = commit("healer: merge healer/T-2 (T-2)\n\nHealer-Ticket: T-2", m1, side)
    forged = commit("healer: merge\n\nHealer-Ticket: T-9", side, base)  # names a ticket, but not on top of main

    def seen(new: str):
        before = guard.GitSnap(Path("."), Path("."), "refs/heads/healer/T-3", refs={"refs/heads/main": base})
        ch = guard.GitChanges([], {"refs/heads/main": (base, new), "refs/heads/healer/T-1": (base, side),
                                   "refs/remotes/origin/main": (base, side)})
        return guard.fleet_moves_dropped(repo, before, ch).refs

    assert seen(m2) == {}
    assert seen(forged) == {"refs/heads/main": (base, forged)}
    # a neighbour's guard putting main back from the agent's commit to where it was: never "restored" to the attack
    before = guard.GitSnap(Path("."), Path("."), "refs/heads/healer/T-3", refs={"refs/heads/main": side})
    assert guard.fleet_moves_dropped(repo, before, guard.GitChanges([], {"refs/heads/main": (side, base)})).refs == {}
    # main moved back over a dispatcher's merge is not that
    back = guard.fleet_moves_dropped(repo, before, guard.GitChanges([], {"refs/heads/main": (m1, base)})).refs
    assert back == {"refs/heads/main": (m1, base)}
    assert seen(side) == {"refs/heads/main": (base, side)}


def test_a_replace_ref_never_changes_what_healer_reads_as_the_base(tmp_path, mode):
    """`git replace BASE FORGED` (a gutted test in FORGED's tree): healer's git never honours replace refs, the
    guard sets the ref aside (unsandboxed; under bwrap refs/replace cannot be written), the gutted test on disk
    is reverted."""
    repo = target_repo(tmp_path / "repo")
    out, _ = run(repo, policy(mode, "replace"))
    assert_contained(repo, out)
    assert not git(repo, "for-each-ref", "refs/replace/")
