"""A proposal rejected for a merge conflict escalates with its reason: the files and main's commits it collided
with, in the escalation's comment, the events and the page's evidence (issue 34), not only in `board show --json`."""

from __future__ import annotations

from healer.fleet.dispatch_stop import evidence, rejections
from healer.fleet.proposals import rejection_reason
from tests.conftest import git
from tests.fleet.conftest import scripted_policy


def test_conflicting_proposal_is_blocked_with_the_files_and_the_commit_it_conflicted_with(fleet_factory):
    f = fleet_factory(scripted_policy())
    f.add("T-1", "broken")  # commits a file named BROKEN on its branch
    assert f.d.tick().launched == [("T-1", "launch")]
    f.settle()
    (f.root / "BROKEN").write_text("main's own version\n")  # a human adds the same file on main meanwhile
    git(f.root, "add", "BROKEN")
    git(f.root, "commit", "-q", "-m", "human: add BROKEN on main")
    human = git(f.root, "rev-parse", "--short", "HEAD")
    for _ in range(10):
        f.d.tick()
        f.settle()
        if f.state("T-1") == "blocked":
            break
    assert f.state("T-1") == "blocked"
    props = f.store.proposals("T-1")
    assert [p.state for p in props] == ["rejected"] * 3
    # the event of each rejection names the files and main's commit
    conflicts = f.events("proposal.conflict", "T-1")
    assert len(conflicts) == 3
    assert conflicts[0].payload["files"] == ["BROKEN"] and conflicts[0].payload["main"] == "main"
    assert conflicts[0].payload["with"] == [f"{human} human: add BROKEN on main"]
    # the escalation: its event and its comment say why, on their first lines
    blocked = f.events("dispatch.blocked", "T-1")[-1].payload
    assert blocked["reason"] == "replays_exhausted"
    assert any("conflict with main in BROKEN" in r and human in r for r in blocked["rejections"])
    body = f.store.comments("T-1")[-1].body
    head = body.splitlines()[:3]
    assert any(ln.startswith("Why: proposal #") and "merge: conflict with main in BROKEN" in ln and "human: add BROKEN" in ln
               for ln in head), body
    assert f.main_head() == git(f.root, "rev-parse", "HEAD")  # main untouched by healer


def test_evidence_names_the_conflict_even_when_the_last_gate_log_is_green():
    from healer.core.dispatch import Stop
    from healer.records import Attempt, Proposal

    log = "$ git merge healer/T-1\nCONFLICT (add/add): Merge conflict in a.py\nmerge: conflict with main in a.py (changed on main by 1a2b3c4 fix)"
    props = [Proposal(id=4, ticket_id="T-1", branch="healer/T-1", commit="c" * 40, state="rejected", created_at=0.0,
                      decided_at=1.0, gate_log=log)]
    atts = [Attempt(1, "T-1", "launch", 0.0, "T-1-01", 1.0, 0, None, None, None, "gate tests: 12 passed")]
    body = evidence(Stop("T-1", "needs_human", "launch_budget", "5 launches"), atts, props, 20)
    assert body.splitlines()[1] == "Why: proposal #4 merge: conflict with main in a.py (changed on main by 1a2b3c4 fix)"
    assert "12 passed" in body  # the green log is still there, below the reason
    assert rejections(props) == ["#4 merge: conflict with main in a.py (changed on main by 1a2b3c4 fix)"]
    assert rejection_reason("gate tests: exit 1") is None  # a failing gate's log speaks for itself


def test_a_conflict_on_the_shared_main_names_the_files_and_the_other_hosts_commit(tmp_path):
    """Several hosts (fleet.shared_remote): the merge is built on the fetched shared main; its conflict says so."""
    from healer.clock import VirtualClock
    from healer.fleet import proposals as pr
    from healer.fleet import shared_main
    from healer.records import Proposal
    from tests.fleet.test_shared_merge import shared_fleet

    bare, root = shared_fleet(tmp_path)
    git(root, "checkout", "-q", "-b", "healer/T-1")
    (root / "a.txt").write_text("the agent's\n")
    git(root, "add", "a.txt")
    git(root, "commit", "-q", "-m", "agent: a\n\nHealer-Run: T-1-01")
    commit = git(root, "rev-parse", "HEAD")
    git(root, "checkout", "-q", "main")
    # another host's clone pushes a different a.txt to the shared main meanwhile
    git(tmp_path, "clone", "-q", str(bare), str(tmp_path / "host2"))
    host2 = tmp_path / "host2"
    for k, v in (("user.email", "h2@healer.invalid"), ("user.name", "host2")):
        git(host2, "config", k, v)
    (host2 / "a.txt").write_text("host 2's\n")
    git(host2, "add", "a.txt")
    git(host2, "commit", "-q", "-m", "host2: a")
    git(host2, "push", "-q", "origin", "main")
    theirs = git(host2, "rev-parse", "--short", "HEAD")
    from healer.policy.load import load_policy

    policy = load_policy(root / "healer.yaml")
    p = Proposal(1, "T-1", "healer/T-1", commit, "open", 0.0)
    v = shared_main.gate_shared(root, policy, p, VirtualClock(), "origin")
    assert v.outcome == pr.REJECTED, v.log
    assert v.conflict == {"main": "origin/main", "files": ["a.txt"], "with": [f"{theirs} host2: a"]}
    assert pr.rejection_reason(v.log) == f"merge: conflict with origin/main in a.txt (changed on origin/main by {theirs} host2: a)"
