"""healer/environ.py: what the agent and the gates get of healer's environment (pure), and the loop applying it."""

from __future__ import annotations

import json
import sys

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
