"""Spend counted as the agent streams, the cap across and within iterations, the idle deadline: real loops
(the CLI, real git, the default sandbox) over tests/loop/fake_cli.py installed as `claude` / `codex` on PATH.
The fake prints the CLIs' documented stream formats; what it prints and when is the test's, not the clock's:
it reports its turns at once, then hangs (or exits), so every outcome is decided by the runner alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from healer import spend
from healer.clock import system
from healer.loop import tap as tap_mod
from healer.loop import usage
from healer.store import open_store
from tests.conftest import wait_until
from tests.loop.conftest import events, final_line, run_loop_cli, solved_gate, state, write_policy

FAKE = Path(__file__).with_name("fake_cli.py")
TURN_USD = 100_000 * 3.0 / 1e6 + 2 * 15.0 / 1e6  # one fake claude turn at Sonnet's price (input + output tokens)


def install(tmp_path: Path, name: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / name
    exe.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = {name!r}\n"
                   f"runpy.run_path({str(FAKE)!r}, init_globals={{'CLI': {name!r}}}, run_name='__main__')\n")
    exe.chmod(0o755)
    return bin_dir


def cli_env(tmp_path: Path, name: str, **cfg) -> dict:
    bin_dir = install(tmp_path, name)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_CLI": json.dumps(cfg)}


def iterations(repo: Path, run_id: str) -> list[dict]:
    return state(repo, run_id)["history"]


@pytest.mark.long  # 8 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_killed_iterations_spend_counts_and_the_next_gets_only_the_remainder(lrepo, tmp_path):
    argv_log = tmp_path / "argv.jsonl"
    env = cli_env(tmp_path, "claude", turns=2, tokens=100_000, then="hang", argv_log=str(argv_log))
    pol = write_policy(tmp_path / "p.yaml", agent={"preset": "claude"}, iteration_timeout="3s", idle_timeout=None,
                       spend_cap_usd=3.0, max_iterations=2, stall={"same_state": 5}, gates=[solved_gate()])
    cp = run_loop_cli(lrepo, pol, "--run-id", "killed", env=env)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    hist = iterations(lrepo, "killed")
    assert [h["timed_out"] for h in hist] == [True, True]  # both killed at the deadline, no result line printed
    # each counted its two turns (the repeated message id once), not $0
    assert [round(h["cost_usd"], 5) for h in hist] == [round(2 * TURN_USD, 5)] * 2
    assert [h["turns"] for h in hist] == [2, 2]
    budgets = [a[a.index("--max-budget-usd") + 1] for a in map(json.loads, argv_log.read_text().splitlines())]
    assert budgets == ["3.00", f"{3.0 - 2 * TURN_USD:.2f}"]  # the second iteration got only what was left
    assert state(lrepo, "killed")["cost_usd"] == pytest.approx(4 * TURN_USD)
    it = [e for e in events(lrepo, subject="killed") if e.kind == "loop.iteration"]
    assert it[0].payload["usage"]["tokens"]["input"] == 200_000 and it[0].payload["day_cost_usd"] > 0


def test_a_turn_over_the_cap_stops_the_agent_mid_iteration(lrepo, tmp_path):
    # output tokens only: the assistant lines say 1-2 of them, each call's message_delta (partial messages) the
    # real 20,000 ($0.30 at Sonnet's $15 per million): without it the cap would never be seen
    env = cli_env(tmp_path, "claude", turns=4, tokens=0, output=20_000, then="hang")
    pol = write_policy(tmp_path / "p.yaml", agent={"preset": "claude"}, iteration_timeout="60s", idle_timeout=None,
                       spend_cap_usd=1.0, gates=[solved_gate()])
    cp = run_loop_cli(lrepo, pol, "--run-id", "cap", env=env)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "spend cap reached" in final_line(cp)
    (h,) = iterations(lrepo, "cap")
    assert h["stopped"] == "spend_cap" and not h["timed_out"]
    assert h["duration"] < 30  # stopped by the cap, not by the 60 s deadline
    assert h["cost_usd"] == pytest.approx(4 * 20_000 * 15.0 / 1e6)
    hit = [e for e in events(lrepo, subject="cap") if e.kind == "loop.spend_cap_hit"]
    assert len(hit) == 1 and hit[0].payload["cap_usd"] == 1.0 and hit[0].payload["turns"] == 4
    assert "over the spend cap" in (lrepo / "progress.md").read_text()


def test_a_silent_agent_is_stopped_at_the_idle_deadline_never_stalled(lrepo, tmp_path):
    env = cli_env(tmp_path, "claude", turns=0, tokens=0, then="silent")
    pol = write_policy(tmp_path / "p.yaml", agent={"preset": "claude"}, iteration_timeout="60s", idle_timeout="1s",
                       gates=[solved_gate()])
    cp = run_loop_cli(lrepo, pol, "--run-id", "idle", env=env)
    assert cp.returncode == 69, cp.stdout + cp.stderr
    line = final_line(cp)
    assert "printed nothing" in line and "stalled" not in line
    hist = iterations(lrepo, "idle")
    assert [h["stopped"] for h in hist] == ["idle", "idle"] and all(h["duration"] < 30 for h in hist)
    idle = [e for e in events(lrepo, subject="idle") if e.kind == "loop.agent_idle"]
    assert [e.payload["n"] for e in idle] == [1, 2] and idle[0].payload["silent_for"] >= 1.0


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_codex_killed_iteration_counts_its_session_files_tokens(lrepo, tmp_path):
    home = tmp_path / "codex-home"
    home.mkdir()
    env = cli_env(tmp_path, "codex", turns=3, tokens=200_000, then="hang")
    env["CODEX_HOME"] = str(home)
    pol = write_policy(tmp_path / "p.yaml", agent={"preset": "codex"}, iteration_timeout="3s", idle_timeout=None,
                       max_iterations=1, gates=[solved_gate()])
    cp = run_loop_cli(lrepo, pol, "--run-id", "codex", env=env)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    (h,) = iterations(lrepo, "codex")
    assert h["timed_out"] and h["cost_usd"] == pytest.approx(3 * 200_000 * 1.25 / 1e6)  # gpt-5's price


def test_codex_stdout_turn_completed_is_priced_from_the_policy(lrepo, tmp_path):
    env = cli_env(tmp_path, "codex", turns=2, tokens=500_000, then="exit", model="house-model", say="edited one file")
    pol = write_policy(tmp_path / "p.yaml", agent={"preset": "codex", "model": "house-model"}, idle_timeout=None,
                       prices={"house": {"input": 2.0, "output": 8.0}}, max_iterations=1, gates=[solved_gate()])
    cp = run_loop_cli(lrepo, pol, "--run-id", "cx2", env=env)  # no CODEX_HOME: stdout alone
    assert cp.returncode == 2, cp.stdout + cp.stderr
    (h,) = iterations(lrepo, "cx2")
    assert h["cost_usd"] == pytest.approx(1_000_000 * 2.0 / 1e6)


# -- the tap alone: the turn that crosses the cap wakes the runner, before the next one is printed ----------


def test_the_tap_reports_the_crossing_turn_at_once(tmp_path):
    crossed = threading.Event()
    seen: list[int] = []
    meter = usage.Meter("claude")

    def on_turns(turns):
        seen.append(len(meter.turns))
        if meter.usd >= 0.5:
            crossed.set()

    with open(tmp_path / "agent.out", "wb", buffering=0) as out:
        tap = tap_mod.Tap(out, meter, system().monotonic, on_turns).start()
        for i in (1, 2):
            line = {"type": "assistant", "message": {"id": f"m{i}", "model": "claude-sonnet-4-5",
                                                     "usage": {"input_tokens": 100_000, "output_tokens": 1}}}
            os.write(tap.writer, (json.dumps(line) + "\n").encode())
        assert crossed.wait(10)  # the second turn ($0.60) crossed: known while the writer is still open
        assert seen[-1] == 2
        tap.finish()
    assert (tmp_path / "agent.out").read_bytes().count(b"\n") == 2


def _start(lrepo: Path, tmp_path: Path, pol: Path, run_id: str, env: dict) -> subprocess.Popen:
    task = tmp_path / "task.md"
    task.write_text("# t\n")
    full = {k: v for k, v in os.environ.items() if k not in ("HEALER_ROOT", "HEALER_FAILPOINTS", "HEALER_AGENT_ID")}
    full.update(env)
    return subprocess.Popen([sys.executable, "-m", "healer", "loop", "run", "--policy", str(pol), "--task", str(task),
                             "--workdir", str(lrepo), "--run-id", run_id], env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_an_iteration_discarded_mid_stream_keeps_its_spend_counted_once(lrepo, tmp_path, sig):
    """SIGTERM discards the iteration (exit 4), SIGKILL leaves it in flight: either way what its turns reported is
    in the run's spend after the resume, and the redone iteration does not count it again."""
    env = cli_env(tmp_path, "claude", turns=2, tokens=100_000, then="hang")
    pol = write_policy(tmp_path / "p.yaml", agent={"preset": "claude"}, iteration_timeout="60s", idle_timeout=None,
                       max_iterations=1, gates=[solved_gate()])
    out = lrepo / ".healer" / "runs" / "disc" / "iter-001" / "agent.out"
    proc = _start(lrepo, tmp_path, pol, "disc", env)
    try:
        wait_until(lambda: out.exists() and out.read_bytes().count(b'"type": "assistant"') == 4, 60, "two turns printed")
        proc.send_signal(sig)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    if sig == signal.SIGTERM:
        assert proc.returncode == 4
        assert state(lrepo, "disc")["cost_usd"] == pytest.approx(2 * TURN_USD)
    env["FAKE_CLI"] = json.dumps({"turns": 1, "tokens": 100_000, "then": "exit"})
    cp = run_loop_cli(lrepo, pol, "--run-id", "disc", "--resume", "disc", env=env)
    assert cp.returncode == 2, cp.stdout + cp.stderr  # the iteration cap
    st = state(lrepo, "disc")
    assert st["cost_usd"] == pytest.approx(3 * TURN_USD)  # two discarded turns + the redone iteration's one
    assert out.with_name("agent.out.counted").exists()
    counted = [e for e in events(lrepo, subject="disc") if e.kind == "loop.spend_counted"]
    assert len(counted) == 1 and counted[0].payload["turns"] == 2


def test_codex_session_files_are_read_only_as_plain_files_never_through_links(tmp_path):
    day = tmp_path / "home" / "sessions" / "2026" / "12" / "04"
    day.mkdir(parents=True)
    line = json.dumps({"type": "event_msg", "payload": {"type": "token_count", "info": {
        "total_token_usage": {"input_tokens": 1_000_000, "cached_input_tokens": 0, "output_tokens": 0}}}}) + "\n"
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text(line)
    (day / "rollout-linked.jsonl").symlink_to(elsewhere)
    with open(tmp_path / "agent.out", "wb", buffering=0) as out:
        tap = tap_mod.Tap(out, usage.Meter("codex"), system().monotonic).start()
        tap.follow_codex(str(tmp_path / "home"), 0.0)
        assert tap.spent() == 0.0  # a link the agent planted is not followed
        (day / "rollout-real.jsonl").write_text(line)
        tap.follow_codex(str(tmp_path / "home"), 0.0)
        tap.follow_codex(str(tmp_path / "home"), 0.0)  # read again: nothing new, nothing counted twice
        assert tap.spent() == pytest.approx(1.25)  # a million input tokens at gpt-5's price
        tap.finish()


# -- a call killed mid-stream (or never ending) is estimated from what streamed, never $0 (issue 40) ----------------


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_claude_call_killed_mid_stream_is_estimated_from_its_streamed_words(lrepo, tmp_path):
    env = cli_env(tmp_path, "claude", turns=1, tokens=100_000, then="hang", streaming="x" * 40_000)
    pol = write_policy(tmp_path / "p.yaml", agent={"preset": "claude"}, iteration_timeout="3s", idle_timeout=None,
                       max_iterations=1, gates=[solved_gate()])
    cp = run_loop_cli(lrepo, pol, "--run-id", "est", env=env)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    (h,) = iterations(lrepo, "est")
    # the finished call as reported; the open one: message_start's input, 40,000 characters / 4 = 10,000 output tokens
    open_call = 100_000 * 3.0 / 1e6 + 10_000 * 15.0 / 1e6
    assert h["timed_out"] and h["cost_usd"] == pytest.approx(TURN_USD + open_call)
    (ev,) = events(lrepo, "loop.iteration")
    assert ev.payload["usage"]["estimated"] is True and ev.payload["usage"]["estimated_turns"] == 1


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_codex_turn_killed_before_response_completed_is_estimated_not_zero(lrepo, tmp_path):
    env = cli_env(tmp_path, "codex", turns=0, tokens=0, then="hang", streaming="y" * 8_000)  # stdout only, no usage ever
    pol = write_policy(tmp_path / "p.yaml", agent={"preset": "codex"}, iteration_timeout="3s", idle_timeout=None,
                       max_iterations=1, gates=[solved_gate()])
    cp = run_loop_cli(lrepo, pol, "--run-id", "cx-est", env=env)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    (h,) = iterations(lrepo, "cx-est")
    prompt = (lrepo / ".healer" / "runs" / "cx-est" / "iter-001" / "prompt.md").read_text()
    want = (len(prompt) // 4) * 1.25 / 1e6 + 2_000 * 10.0 / 1e6  # gpt-5's price: the prompt in, the words out
    assert h["timed_out"] and h["cost_usd"] == pytest.approx(want) and h["cost_usd"] > 0
    (ev,) = events(lrepo, "loop.iteration")
    assert ev.payload["usage"]["estimated"] is True


def test_finished_calls_are_never_estimated():
    m = usage.Meter("claude")
    for ln in (json.dumps({"type": "stream_event", "event": {"type": "message_start", "message": {
                   "id": "m1", "model": "claude-sonnet-4-5", "usage": {"input_tokens": 10, "output_tokens": 1}}}}),
               json.dumps({"type": "stream_event", "event": {"type": "content_block_delta", "delta": {"text": "z" * 400}}}),
               json.dumps({"type": "stream_event", "event": {"type": "message_delta", "usage": {"output_tokens": 30}}})):
        m.feed(ln)
    assert m.estimate_open(10_000) == [] and m.estimated == 0 and m.tokens.output == 30
    c = usage.Meter("codex")
    for ln in ('{"type":"turn.started"}', '{"type":"item.completed","item":{"id":"a","type":"agent_message","text":"hi"}}',
               '{"type":"turn.completed","usage":{"input_tokens":5000,"output_tokens":7}}'):
        c.feed(ln)
    assert c.estimate_open(10_000) == [] and c.estimated == 0


def test_a_fleet_run_names_its_ticket_and_cli_so_its_spend_is_the_tickets(lrepo, tmp_path):
    """loop.started carries the fleet's ticket (HEALER_TICKET) and the CLI: healer/spend.py folds the run's streamed
    spend into that ticket, that day and that CLI (`board list`, `status`, the metrics; issue 43)."""
    env = {**cli_env(tmp_path, "claude", turns=1, tokens=100_000, then="exit"), "HEALER_TICKET": "T-9"}
    pol = write_policy(tmp_path / "p.yaml", agent={"preset": "claude"}, max_iterations=1, gates=[solved_gate()])
    cp = run_loop_cli(lrepo, pol, "--run-id", "fleet-run", env=env)
    [started] = [e for e in events(lrepo, subject="fleet-run") if e.kind == "loop.started"]
    assert started.payload["ticket"] == "T-9" and started.payload["preset"] == "claude", cp.stdout + cp.stderr
    s = open_store(lrepo)
    try:
        whole, alone = spend.ledger_of(s), spend.ticket_ledger(s, "T-9")
    finally:
        s.close()
    spent = state(lrepo, "fleet-run")["cost_usd"]
    assert spent > 0
    assert whole.by_ticket == {"T-9": pytest.approx(spent)} and whole.by_cli == {"claude": pytest.approx(spent)}
    assert alone.by_ticket == whole.by_ticket and alone.iterations == {"T-9": 1} and alone.clis == {"T-9": {"claude"}}
