"""The CLI: usage errors are one line with the right exit code; status, list, pause."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import healer
from tests.loop.conftest import (
    PY,
    agent,
    events,
    final_line,
    loop_commits,
    loop_repo,
    run_loop_cli,
    solved_gate,
    steps_gate,
    write_policy,
)


def one_line(r):
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.long  # 10 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_usage_and_input_errors(lrepo, tmp_path):
    pol = write_policy(tmp_path / "p.yaml", agent={"command": agent("loop_noop.py")}, gates=[solved_gate()])
    r = healer("loop", "run", "--policy", str(pol), "--workdir", str(lrepo))
    assert r.returncode == 64 and "--task" in one_line(r)
    r = healer("loop", "run", "--policy", str(pol), "--task", str(tmp_path / "missing.md"), "--workdir", str(lrepo))
    assert r.returncode == 65 and "no such task file" in one_line(r)
    (tmp_path / "t.md").write_text("t\n")
    r = healer("loop", "run", "--policy", str(pol), "--task", str(tmp_path / "t.md"), "--workdir", str(tmp_path / "nogit"))
    assert r.returncode == 64 and "git working tree" in one_line(r)
    nogates = write_policy(tmp_path / "g.yaml", agent={"command": agent("loop_noop.py")})
    r = healer("loop", "run", "--policy", str(nogates), "--task", str(tmp_path / "t.md"), "--workdir", str(lrepo))
    assert r.returncode == 65 and "loop.gates" in one_line(r)
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nloop:\n  max_iterations: many\n")
    r = healer("loop", "run", "--policy", str(bad), "--task", str(tmp_path / "t.md"), "--workdir", str(lrepo))
    assert r.returncode == 65 and "bad.yaml:3:" in r.stderr
    r = healer("loop", "run", "--policy", str(pol), "--task", str(tmp_path / "t.md"), "--workdir", str(lrepo),
               "--max-iterations", "99")
    assert r.returncode == 64 and "absolute_max" in one_line(r)
    r = healer("loop", "run", "--policy", str(pol), "--task", str(tmp_path / "t.md"), "--workdir", str(lrepo),
               "--run-id", "../x")
    assert r.returncode == 64
    missing = write_policy(tmp_path / "m.yaml", agent={"command": ["no-such-agent-binary", "{prompt_file}"]},
                           gates=[solved_gate()])
    r = healer("loop", "run", "--policy", str(missing), "--task", str(tmp_path / "t.md"), "--workdir", str(lrepo))
    assert r.returncode == 65 and "not found" in one_line(r)
    r = healer("loop", "status", "nope", "--workdir", str(lrepo))
    assert r.returncode == 64


def test_agent_cmd_after_dashdash_status_list(lrepo, tmp_path):
    pol = write_policy(tmp_path / "p.yaml", gates=[steps_gate(1)])
    cp = run_loop_cli(lrepo, pol, "--run-id", "dd", "--", *agent("loop_converge.py", "{iteration}"))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    r = healer("loop", "status", "dd", "--workdir", str(lrepo), "--json")
    d = json.loads(r.stdout)
    assert d["status"] == "ended" and d["exit_code"] == 0 and d["committed"] is True
    r = healer("loop", "list", "--workdir", str(lrepo), "--json")
    assert [x["run_id"] for x in json.loads(r.stdout)] == ["dd"]
    r = healer("loop", "list", "--workdir", str(lrepo))
    assert r.returncode == 0 and "dd" in r.stdout
    r = healer("loop", "pause", "dd", "--workdir", str(lrepo))
    assert r.returncode == 0 and "already ended" in r.stdout  # it succeeded: nothing to pause, nothing to resume


def test_failpoints_are_listed():
    r = healer("failpoints", "--json")
    names = {p["name"] for p in json.loads(r.stdout)}
    assert {"loop.before_agent", "loop.after_agent", "loop.before_gates", "loop.before_commit",
            "loop.after_persist"} <= names


def test_presets_build_argv_without_shell():
    from healer.loop import agents

    c = agents.preset_spec("claude", model="sonnet", max_turns=8)
    argv = agents.render(c, prompt_file="/p", workdir="/w", iteration=2, remaining_usd=1.5)
    assert argv[:5] == ["claude", "-p", "--output-format", "stream-json", "--verbose"]
    assert argv[-2:] == ["--max-budget-usd", "1.50"] and "--max-turns" in argv and "sonnet" in argv
    assert c.stdin_prompt
    x = agents.preset_spec("codex")
    argv = agents.render(x, prompt_file="/p", workdir="/w", iteration=2, prompt="do; rm -rf /")
    assert argv[:5] == ["codex", "exec", "--json", agents.CODEX_BYPASS, "--skip-git-repo-check"]  # healer's sandbox
    assert argv[-3:] == ["--cd", "/w", "do; rm -rf /"]
    x = agents.preset_spec("codex", sandboxed=False)
    assert agents.render(x, prompt_file="/p", workdir="/w", iteration=2)[3:5] == ["--sandbox", "workspace-write"]
    cmd = agents.preset_spec("command", ["a", "{prompt_file}", "--n={iteration}", "{workdir}"])
    assert agents.render(cmd, prompt_file="/p", workdir="/w", iteration=3) == ["a", "/p", "--n=3", "/w"]


def test_list_in_a_fleet_root_sees_its_runs_and_pause_of_an_ended_run_is_a_no_op(lrepo, tmp_path):
    # regressions: `loop list` in the fleet's folder showed none of its runs without --root;
    # `loop pause` of a finished run wrote a PAUSE file and said "continue with --resume"
    from tests.conftest import make_repo

    fleet = make_repo(tmp_path / "fleet")
    assert healer("init", cwd=fleet).returncode == 0
    pol = write_policy(tmp_path / "p.yaml", agent={"command": agent("loop_converge.py", "{iteration}")},
                       gates=[steps_gate(1)])
    cp = run_loop_cli(lrepo, pol, "--run-id", "fl", "--root", str(fleet))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    env = {"HEALER_ROOT": ""}
    r = healer("loop", "list", "--json", cwd=fleet, env=env)
    assert r.returncode == 0, r.stderr
    assert [d["run_id"] for d in json.loads(r.stdout)] == ["fl"]
    r = healer("loop", "pause", "fl", cwd=fleet, env=env)
    assert r.returncode == 0 and "already ended" in r.stdout, r.stdout + r.stderr
    assert not (lrepo / ".healer" / "runs" / "fl" / "PAUSE").exists()


def test_a_finished_run_ends_without_teardown_yet_flushes_its_lines_and_keeps_its_exit_code(lrepo, tmp_path):
    """`loop run` leaves through os._exit once its work is done (healer.launch._leave): every line it wrote
    still reaches the pipe, the store is readable, and a reader that went away changes neither the exit code
    nor adds a traceback (the interpreter's own exit turned that into exit 120 and an 'Exception ignored')."""
    pol = write_policy(tmp_path / "p.yaml", gates=[steps_gate(2)])
    # block-buffered stdout (an empty PYTHONUNBUFFERED is unset), as under a dispatcher's log pipe
    cp = run_loop_cli(lrepo, pol, "--run-id", "fx", "--", *agent("loop_converge.py", "{iteration}"),
                      env={"PYTHONUNBUFFERED": ""})
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "iteration" in cp.stdout and final_line(cp), cp.stdout
    assert "loop.ended" in [e.kind for e in events(lrepo, subject="fx")]
    again = loop_repo(tmp_path / "again")
    p = subprocess.Popen([PY, "-m", "healer", "loop", "run", "--policy", str(pol), "--workdir", str(again),
                          "--task", str(tmp_path / "task.md"), "--run-id", "gone", "--",
                          *agent("loop_converge.py", "{iteration}")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.close()  # the reader is gone before the loop writes a line
    err = p.stderr.read()
    assert p.wait(timeout=120) == 0, err  # the loop went on without its reader: success, not 70 or 120
    assert loop_commits(again) and "loop.ended" in [e.kind for e in events(again, subject="gone")]
    assert "Traceback" not in err and "Exception ignored" not in err, err
