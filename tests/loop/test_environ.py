"""healer/environ.py: what the agent and the gates get of healer's environment (pure), and the loop applying it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from healer.environ import BASE, NEVER, for_programs
from tests.conftest import make_repo

NAMES = st.sampled_from(["PATH", "HOME", "LC_ALL", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "ANTHROPIC_API_KEY",
                         "GITHUB_TOKEN", "HEALER_STORE_URL", "HEALER_FAILPOINTS", "PGPASSWORD", "HEALER_LOOP_RUN_ID",
                         "X"])


@given(st.dictionaries(NAMES, st.text(max_size=5)), st.none() | st.lists(st.sampled_from(["AWS_*", "X", "GITHUB_TOKEN"])))
def test_never_healers_own_and_only_what_is_passed(env, passed):
    out = for_programs(env, passed)
    assert not set(out) & set(NEVER)
    assert all(out[k] == env[k] for k in out)
    if passed is None:
        assert set(out) == set(env) - set(NEVER)
    else:
        import fnmatch

        want = {k for k in env if k not in NEVER and any(fnmatch.fnmatchcase(k, p) for p in (*BASE, *passed))}
        assert set(out) == want


DUMP = "import json, os, sys\nopen(sys.argv[1], 'a').write(json.dumps(sorted(os.environ)) + '\\n')\n"


def test_the_loops_agent_and_gate_get_the_passed_environment(tmp_path, monkeypatch):
    from healer.loop import LoopRequest, run_loop
    from healer.policy.schema import Policy

    repo = make_repo(tmp_path / "repo")
    dump = tmp_path / "env.jsonl"
    (tmp_path / "dump.py").write_text(DUMP)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    monkeypatch.setenv("PGPASSWORD", "pw")
    prog = [sys.executable, str(tmp_path / "dump.py"), str(dump)]
    pol = Policy.model_validate({"version": 1, "loop": {
        "max_iterations": 1, "sandbox": "none", "env_pass": ["ANTHROPIC_API_KEY"], "agent": {"command": prog},
        "gates": [{"name": "env", "run": prog, "timeout": "30s"}]}})
    run_loop(LoopRequest(workdir=repo, policy=pol, task="t", run_id="env", handle_signals=False, echo=lambda s: None))
    agent, gate = (set(json.loads(line)) for line in dump.read_text().splitlines())
    for got in (agent, gate):
        assert "ANTHROPIC_API_KEY" in got and "PATH" in got and "HOME" in got
        assert "AWS_SECRET_ACCESS_KEY" not in got and "PGPASSWORD" not in got
    assert "HEALER_LOOP_RUN_ID" in agent


SCRATCH = ("import os, sys, tempfile\n"
           "d = tempfile.mkdtemp(prefix='cli-scratch-')\n"
           "open(os.path.join(d, 'socket-or-cache'), 'w').write('x')\n"
           "open(sys.argv[1], 'a').write(os.environ['TMPDIR'] + ' ' + d + '\\n')\n")


def test_an_unsandboxed_iteration_has_a_temp_dir_of_its_own(tmp_path):
    """What the real CLIs did: Claude Code's claude-0/ and Codex's codex-*/ landed in the machine's /tmp. Unsandboxed,
    the agent and the gates get TMPDIR in the tree's .healer/tmp/NNN (kept as evidence), never an outside write."""
    from healer.loop import LoopRequest, run_loop
    from healer.policy.schema import Policy
    from healer.store import open_store

    repo = make_repo(tmp_path / "repo")
    said = tmp_path / "tmp.txt"
    (tmp_path / "scratch.py").write_text(SCRATCH)
    prog = [sys.executable, str(tmp_path / "scratch.py"), str(said)]
    pol = Policy.model_validate({"version": 1, "loop": {
        "max_iterations": 2, "sandbox": "none", "agent": {"command": prog},
        "gates": [{"name": "scratch", "run": prog, "timeout": "30s"}, {"name": "red", "run": ["false"], "timeout": "30s"}]}})
    run_loop(LoopRequest(workdir=repo, policy=pol, task="t", run_id="tmp", handle_signals=False, echo=lambda s: None))
    lines = [line.split() for line in said.read_text().splitlines()]
    own = repo / ".healer" / "tmp"
    assert [t for t, _ in lines] == [str(own / "001")] * 2 + [str(own / "002")] * 2  # agent, gate; per iteration
    assert all((Path(d) / "socket-or-cache").is_file() for _, d in lines)
    s = open_store(repo)
    try:
        outside = {p for e in s.events(prefix="loop.outside_write") for p in e.payload["paths"]}
        assert outside == {str(said)}  # this test's own record, written beside the tree: the scratch is not outside
        assert [e.kind for e in s.events(prefix="loop.ended")]  # the loop's events are in this store
    finally:
        s.close()
