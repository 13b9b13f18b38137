"""Files that steer the next program (issue 39, item 3): an agent's `.claude/settings.json` hook, AGENTS.md,
CLAUDE.md and the like. They are quarantined after the agent's step and before the next one (what the gates' run
planted too), reported, never committed; the policy may allow one. The real loop, the real sandbox
(chaos/agents/hostile.py `instructions`)."""

from __future__ import annotations

import json

from healer import guarded
from tests.conftest import git
from tests.security.conftest import PY, events, policy, run, target_repo

PLANTED = (".claude/settings.json", ".claude/settings.local.json", "AGENTS.md", "CLAUDE.md", "sub/AGENTS.md", ".envrc",
           ".vscode/tasks.json", ".github/workflows/x.yml", ".mcp.json")


def _gates(mode: str, *args: str, **loop):
    """The default pytest gate, after one that imports the project (`app.py`): the code the gates run."""
    pol = policy(mode, *args, **loop)
    first = {"name": "imports", "run": [PY, "-c", "import app"], "timeout": "60s"}
    return policy(mode, *args, **loop, gates=[first, *[g.model_dump(mode="json") for g in pol.loop.gates]])


def _committed(repo) -> list[str]:
    return git(repo, "ls-tree", "-r", "--name-only", "HEAD").splitlines()


def test_planted_instruction_files_are_quarantined_reported_and_never_committed(tmp_path, mode):
    """Iteration 1 plants a SessionStart hook, AGENTS.md, CLAUDE.md (and the rest), a hidden settings file and a
    conftest.py that writes CLAUDE.md again while the gates run; iteration 2 writes the right answer. Iteration 2's
    agent finds none of them, the commit holds none, each is in healer's quarantine and named by an event. (The
    pytest gate refuses the tree's conftest.py; the CLAUDE.md planted at gate time comes from app.py, imported by
    the first gate.)"""
    repo = target_repo(tmp_path / "repo")
    witness = tmp_path / "witness"
    out, lines = run(repo, _gates(mode, "instructions", str(witness), max_iterations=2))
    assert out.exit_code == 0, (out, lines)
    assert json.loads((repo / "seen-2.json").read_text()) == [], "iteration 2 started with planted files"
    assert sorted(json.loads((repo / "seen-1.json").read_text())) == []  # the base had none
    tree = _committed(repo)
    assert git(repo, "show", "HEAD:solution.txt") == "42"
    assert not [p for p in tree if guarded.instruction_file(p, guarded.INSTRUCTION_FILES)], tree
    assert "conftest.py" not in tree and git(repo, "show", "HEAD:app.py") == ""
    for p in PLANTED:
        assert not (repo / p).exists(), p
    got = events(repo, "loop.instruction_files_quarantined")
    after_agent = {p for e in got if e.payload["phase"] == "agent" for p in e.payload["paths"]}
    assert set(PLANTED) <= after_agent, got
    before_agent = [e for e in got if e.payload["phase"] == "before agent"]
    assert before_agent and "CLAUDE.md" in before_agent[0].payload["paths"], got  # what the gates' run planted
    saved = [m["saved_as"] for e in got for m in e.payload["moves"]]
    assert saved and all(s and (tmp_path / s).exists() for s in saved), saved  # kept, nothing deleted
    assert not witness.exists()


def test_a_policy_may_allow_an_instruction_file(tmp_path, mode):
    """`loop.instruction_files_allow: [AGENTS.md]`: the agent's AGENTS.md (at any depth) is committed, the rest is not."""
    repo = target_repo(tmp_path / "repo")
    out, lines = run(repo, policy(mode, "instructions", str(tmp_path / "w"), max_iterations=2,
                                  instruction_files_allow=["AGENTS.md"]))
    assert out.exit_code == 0, (out, lines)
    tree = _committed(repo)
    assert "AGENTS.md" in tree and "sub/AGENTS.md" in tree
    assert not [p for p in tree if p.startswith((".claude/", ".vscode/", ".github/")) or p in ("CLAUDE.md", ".envrc")]
    assert json.loads((repo / "seen-2.json").read_text()) == ["AGENTS.md", "sub/AGENTS.md"]


def test_the_policy_extends_the_list(tmp_path, mode):
    """`loop.instruction_files: [seen-1.json]`: a file of the project's own becomes one; the default list stays."""
    repo = target_repo(tmp_path / "repo")
    out, _ = run(repo, policy(mode, "instructions", str(tmp_path / "w"), max_iterations=2,
                              instruction_files=["seen-1.json"]))
    assert out.exit_code == 0
    tree = _committed(repo)
    assert "seen-1.json" not in tree and "seen-2.json" in tree and ".claude/settings.json" not in tree


def test_the_default_list_and_its_matching():
    entries = guarded.instruction_patterns()
    for p in (".claude/settings.json", "CLAUDE.md", "a/b/CLAUDE.md", "AGENTS.md", "pkg/AGENTS.md", ".mcp.json", ".envrc",
              ".github/workflows/ci.yml", ".vscode/tasks.json", ".cursor/rules/x.mdc", ".codex/config.toml", "GEMINI.md",
              ".gitattributes", ".pre-commit-config.yaml"):
        assert guarded.instruction_file(p, entries), p
    for p in ("src/claude.py", "docs/AGENTS.md.txt", ".github/CODEOWNERS", "README.md", "tests/test_x.py"):
        assert not guarded.instruction_file(p, entries), p
    assert not guarded.instruction_file("x/AGENTS.md", entries, ["AGENTS.md"])
    assert guarded.instruction_file(".vscode/tasks.json", entries, [".vscode/settings.json"])
    assert not guarded.instruction_file(".vscode/settings.json", entries, [".vscode/settings.json"])
