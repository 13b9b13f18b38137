"""CLI conventions an operator relies on (issue 16): --version, --debug keeps exit codes, 69 for an
unavailable service, Ctrl-C is exit 4, policy validate catches what `plan` would refuse, merge commits
name their ticket, label-scoped runbook rules."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from healer import __version__
from healer.clock import VirtualClock
from healer.core import decide
from healer.core.model import Memory, Snapshot
from healer.fleet.proposals import MERGED, gate_proposal
from healer.policy.schema import Policy
from healer.records import Proposal
from healer.store import open_store
from tests.conftest import PY, git, healer, make_repo, wait_until
from tests.synth import T0, ticket


def _fleet(tmp_path, policy: str = ""):
    root = make_repo(tmp_path / "fleet")
    assert healer("init", "--root", str(root)).returncode == 0
    if policy:
        (root / "healer.yaml").write_text(policy)
    return root


def test_version():
    r = healer("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"healer {__version__}"


def test_debug_keeps_every_exit_code(tmp_path):
    for args, code in ((["board", "show", "T-9", "--root", str(tmp_path)], 64),
                       (["no-such-command"], 64)):
        plain, dbg = healer(*args), healer("--debug", *args)
        assert plain.returncode == dbg.returncode == code, (args, dbg.stderr[-500:])
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nloop: {max_iterations: -3}\n")
    r = healer("--debug", "policy", "validate", str(bad))
    assert r.returncode == 65 and "bad.yaml:2" in r.stderr


def test_no_docker_engine_is_exit_69(tmp_path):
    r = healer("containers", "list", "--label", "healer.kind=agent", env={"DOCKER_HOST": f"unix://{tmp_path}/no-such.sock"})
    assert r.returncode == 69, r.stderr
    assert "no Docker engine answers" in r.stderr and "Traceback" not in r.stderr


def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([PY, "-m", "healer", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_journal_follow_exits_4_on_ctrl_c_and_0_on_sigterm(tmp_path):
    root = _fleet(tmp_path)
    for sig, code in ((signal.SIGINT, 4), (signal.SIGTERM, 0)):
        p = _spawn("journal", "-f", "--root", str(root))
        try:
            wait_until(lambda p=p: p.poll() is None and _has_fd_on_db(p.pid), 60, "journal -f reading the store")
            p.send_signal(sig)
            assert p.wait(timeout=40) == code, p.stderr.read()[-2000:]
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()


def _has_fd_on_db(pid: int) -> bool:
    import os

    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}").endswith("healer.db") for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def _ticks(root, kind: str) -> int:
    s = open_store(root)
    try:
        return s.count_events(kind)
    finally:
        s.close()


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@pytest.mark.parametrize("daemon", ["supervise", "dispatch"])
def test_supervise_and_dispatch_exit_4_on_ctrl_c_and_0_on_sigterm_as_up_does(tmp_path, daemon):
    root = _fleet(tmp_path, "supervisor:\n  tick: 1s\nfleet:\n  dispatch_tick: 1s\n"
                            "loop:\n  agent: {command: [python3, -c, pass]}\n  gates: [{name: ok, run: [python3, -c, pass]}]\n")
    kind = "supervisor.tick" if daemon == "supervise" else "dispatch.tick"
    for sig, code in ((signal.SIGINT, 4), (signal.SIGTERM, 0)):
        before = _ticks(root, kind)
        p = _spawn(daemon, "--root", str(root))
        try:
            wait_until(lambda before=before: _ticks(root, kind) > before, 60, f"a {kind} of this {daemon}")
            p.send_signal(sig)
            assert p.wait(timeout=40) == code, p.stderr.read()[-2000:]
            if code == 4:
                assert p.stderr.read().strip().splitlines()[-1] == f"healer {daemon}: stopped (interrupted)"
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_out_of_range_numbers_are_refused_when_the_command_line_is_read(tmp_path):
    root = _fleet(tmp_path)
    for args, opt in ((["supervise", "--once", "--metrics-port", "99999"], "--metrics-port"),
                      (["supervise", "--once", "--metrics-port", "-5"], "--metrics-port"),
                      (["gameday", "explore", "-n", "0"], "--examples"), (["gameday", "explore", "-n", "-3"], "--examples")):
        r = healer(*args, "--root", str(root)) if args[0] == "supervise" else healer(*args, cwd=root)
        assert r.returncode == 64, (args, r.stderr)
        assert opt in r.stderr and "internal error" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    s = open_store(root)
    try:
        assert s.count_events("supervisor.tick") == 0  # refused before anything ran
    finally:
        s.close()


@pytest.mark.campaign  # a dispatcher and a supervisor started for real: `make campaigns`
def test_up_exits_4_on_ctrl_c(tmp_path):
    root = _fleet(tmp_path, "supervisor:\n  tick: 1s\nfleet:\n  dispatch_tick: 1s\n"
                            "loop:\n  agent: {command: [python3, -c, pass]}\n  gates: [{name: ok, run: [python3, -c, pass]}]\n")
    p = _spawn("up", "--root", str(root))
    try:
        def ticked():
            s = open_store(root)
            try:
                return s.count_events("supervisor.tick") >= 1
            finally:
                s.close()

        wait_until(ticked, 60, "a supervisor tick")
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=40) == 4, p.stderr.read()[-2000:]
        s = open_store(root)
        try:
            assert s.lease("supervisor") is None and s.lease("dispatcher") is None
        finally:
            s.close()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_policy_validate_refuses_a_missing_runbook_folder_and_warns_without_merge_gates(tmp_path):
    f = tmp_path / "healer.yaml"
    f.write_text("version: 1\ninclude_runbooks: [no-such-folder]\n")
    r = healer("policy", "validate", str(f))
    assert r.returncode == 65 and r.stderr.strip() == f"{f}: include_runbooks: no-such-folder: no such runbook file or folder"
    f.write_text("version: 1\n")
    r = healer("policy", "validate", str(f))
    assert r.returncode == 0 and "warning: fleet.merge_gates is empty" in r.stderr
    f.write_text("version: 1\nfleet:\n  merge_gates: [{name: tests, run: [python3, -c, pass]}]\n")
    r = healer("policy", "validate", str(f))
    assert r.returncode == 0 and "warning" not in r.stderr


def test_a_merge_commit_names_its_ticket_even_when_main_could_fast_forward(tmp_path):
    root = make_repo(tmp_path / "repo")
    git(root, "checkout", "-q", "-b", "healer/T-7")
    (root / "fix.txt").write_text("fixed\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "agent work\n\nHealer-Run: r1")  # the loop's trailer: the fleet merges only those
    commit = git(root, "rev-parse", "HEAD")
    git(root, "checkout", "-q", "main")
    p = Proposal(id=1, ticket_id="T-7", branch="healer/T-7", commit=commit, state="open", created_at=T0)
    v = gate_proposal(root, Policy(), p, VirtualClock(T0))
    assert v.outcome == MERGED, v.log
    assert git(root, "log", "-1", "--format=%s", "main") == "healer: merge healer/T-7 (T-7)"
    assert git(root, "log", "-1", "--format=%(trailers:key=Healer-Ticket,valueonly)", "main").strip() == "T-7"
    assert git(root, "merge-base", "--is-ancestor", commit, "main") == ""


def test_a_rule_for_one_label_leaves_the_default_for_the_others():
    pol = Policy.model_validate({"version": 1, "health": {"stale_labels": {"to-review": "2h", "wip": "2h"}},
                                 "rules": [{"id": "keep-review", "when": "stale_label", "labels": ["to-review"], "do": ["notify"]}]})
    t = ticket("T-1", "blocked", at=T0, labels={"to-review": T0, "wip": T0})
    d = decide(Snapshot(now=T0 + 3 * 3600, tickets=(t,)), pol, Memory())
    dropped = sorted(a.params["label"] for a in d.actions if a.action == "drop_label")
    assert dropped == ["wip"]  # the default rule still answers `wip`; `to-review` only notifies
    assert not any(a.action == "drop_label" and a.params["label"] == "to-review" for a in d.actions)
    plain = decide(Snapshot(now=T0 + 3 * 3600, tickets=(t,)), Policy.model_validate(
        {"version": 1, "health": {"stale_labels": {"to-review": "2h", "wip": "2h"}}}), Memory())
    assert sorted(a.params["label"] for a in plain.actions if a.action == "drop_label") == ["to-review", "wip"]


def test_healer_module_entry_point_is_the_same_cli():
    r = subprocess.run([sys.executable, "-m", "healer", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and __version__ in r.stdout
