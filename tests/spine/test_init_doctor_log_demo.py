"""healer init (idempotent), doctor, logging (stderr + JSON lines, no secrets), demo."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from loguru import logger

from healer import log
from healer.policy import Policy, load_policy
from healer.store import open_store
from tests.conftest import healer, make_repo


def test_init_creates_fleet_policy_and_gitignore_once(cli, tmp_path):
    repo = make_repo(tmp_path / "repo")
    (repo / ".gitignore").write_text("*.pyc")  # no trailing newline, no .healer entry
    r = cli("init", cwd=repo)
    assert r.code == 0, r.err
    assert (repo / ".healer" / "healer.db").exists()
    assert load_policy(repo / "healer.yaml") == Policy()
    assert (repo / ".gitignore").read_text() == "*.pyc\n.healer/\n"
    assert "created healer.yaml" in r.out

    (repo / "healer.yaml").write_text("loop:\n  max_iterations: 3\n")  # the user's edits survive a re-run
    again = cli("init", cwd=repo)
    assert again.code == 0 and "nothing changed" in again.out
    assert (repo / "healer.yaml").read_text() == "loop:\n  max_iterations: 3\n"
    assert (repo / ".gitignore").read_text() == "*.pyc\n.healer/\n"
    s = open_store(repo)
    try:
        inits = s.events(kinds=["fleet.init"])
        assert len(inits) == 2 and inits[1].payload["created"] == []
    finally:
        s.close()


def test_init_respects_an_existing_ignore_form(cli, tmp_path):
    (tmp_path / ".gitignore").write_text("/.healer\n")
    assert cli("init", "--root", str(tmp_path)).code == 0
    assert (tmp_path / ".gitignore").read_text() == "/.healer\n"


def test_init_outside_git_says_so_on_one_line(cli, tmp_path):
    # regression: init in a plain folder said "fleet ready"; the first `healer dispatch` then failed (64)
    plain = tmp_path / "plain"
    plain.mkdir()
    r = cli("init", "--root", str(plain))
    assert r.code == 0 and (plain / ".healer").is_dir()
    assert len(r.err.strip().splitlines()) == 1 and "not a git repository" in r.err
    d = cli("doctor", "--json", "--root", str(plain))
    assert d.code == 0  # informational: supervise, watch and the board work without git
    warns = [c["detail"] for c in json.loads(d.out)["checks"] if c["name"] == "dispatch"]
    assert any("not a git repository" in w for w in warns) and any("loop.agent.command" in w for w in warns)
    repo = make_repo(tmp_path / "repo")
    r = cli("init", "--root", str(repo))
    assert r.code == 0 and "not a git repository" not in r.err


def test_paths_that_cannot_be_a_fleet_or_an_output_folder_are_one_line_and_leave_nothing_half_made(cli, tmp_path):
    (tmp_path / "afile").write_text("hi\n")
    (tmp_path / "i1" / ".gitignore").mkdir(parents=True)
    (tmp_path / "i3").mkdir()
    (tmp_path / "i3" / ".healer").write_text("x\n")
    for args, needle in ((["init", "--root", str(tmp_path / "afile")], "expected the fleet's folder, found a file"),
                         (["init", "--root", "/proc/x"], "--root /proc/x: no such folder"),
                         (["init", "--root", str(tmp_path / "typo" / "fleet")], "no such folder"),
                         (["init", "--root", str(tmp_path / "i1")], ".gitignore: expected a file, found a folder"),
                         (["init", "--root", str(tmp_path / "i3")], ".healer: expected a folder, found a file"),
                         (["runbook", "new", "my-rule", "--dir", "/proc/x"], "--dir /proc/x: cannot make the folder"),
                         (["gameday", "new", "x", "--out", "/proc/x/y.yaml"], "--out /proc/x/y.yaml: cannot make the folder"),
                         (["gameday", "explore", "--out", str(tmp_path / "afile" / "y.yaml")], "afile is a file")):
        r = cli(*args)
        assert r.code == 64, (args, r.err)
        assert r.err.startswith("healer: ") and needle in r.err and len(r.err.strip().splitlines()) == 1, (args, r.err)
    assert sorted(p.name for p in (tmp_path / "i1").iterdir()) == [".gitignore"]  # no half-made fleet
    assert not (tmp_path / "typo").exists()
    (tmp_path / "i4").mkdir()
    (tmp_path / "i4" / ".gitignore").write_bytes(b"caf\xe9\n")  # not UTF-8: git reads it, and so does init
    assert cli("init", "--root", str(tmp_path / "i4")).code == 0
    assert (tmp_path / "i4" / ".gitignore").read_bytes() == b"caf\xe9\n.healer/\n"


def test_doctor_in_a_fleet_and_outside(cli, tmp_path, tmp_path_factory):
    cli("init", cwd=tmp_path)
    r = cli("doctor", "--json", cwd=tmp_path)
    assert r.code == 0, r.out
    report = json.loads(r.out)
    checks = {c["name"]: c for c in report["checks"]}
    assert report["ok"] is True and report["root"] == str(tmp_path)
    assert {"python", "git", "store", "policy", "docker", "failpoints"} <= set(checks)
    assert checks["store"]["status"] == "ok" and "journal_mode=wal" in checks["store"]["detail"]
    assert checks["docker"]["required"] is False and checks["docker"]["status"] in ("ok", "info")
    assert "healer doctor" in cli("doctor", cwd=tmp_path).out

    (tmp_path / "healer.yaml").write_text("loop:\n  max_iterations: 0\n")
    bad = cli("doctor", "--json", cwd=tmp_path)
    assert bad.code == 1
    pol = next(c for c in json.loads(bad.out)["checks"] if c["name"] == "policy")
    assert pol["status"] == "fail" and "healer.yaml:2:3: loop.max_iterations: expected at least 1, got 0" in pol["detail"]

    outside = tmp_path_factory.mktemp("plain")
    r = cli("doctor", "--json", cwd=outside)
    assert r.code == 0 and json.loads(r.out)["root"] is None


def test_logs_go_to_stderr_and_json_lines(tmp_path):
    healer("init", cwd=tmp_path)
    r = healer("--debug", "board", "add", "logged", cwd=tmp_path)
    assert r.returncode == 0
    assert "DEBUG" in r.stderr and "board: add T-1" in r.stderr
    quiet = healer("board", "add", "quiet", cwd=tmp_path)
    assert "board:" not in quiet.stderr  # INFO without --debug
    lines = (tmp_path / ".healer" / "logs" / "healer.jsonl").read_text().splitlines()
    records = [json.loads(ln)["record"] for ln in lines]
    assert [r["message"] for r in records if r["message"].startswith("board: add")] == [
        "board: add T-1 by a human {'title': 'logged'}", "board: add T-2 by a human {'title': 'quiet'}"]


def test_no_log_outside_a_fleet(tmp_path):
    r = healer("policy", "show", cwd=tmp_path)
    assert r.returncode == 0 and not (tmp_path / ".healer").exists()


def test_secrets_never_reach_a_sink(tmp_path, monkeypatch):
    (tmp_path / ".healer").mkdir()
    monkeypatch.setenv("HEALER_WEBHOOK_SECRET", "s3cr3t-value-123")
    log.add_secret("custom-sig-998877")
    out = log.setup(tmp_path, stderr=False)
    try:
        logger.info("posting with secret s3cr3t-value-123 and Authorization: Bearer abc.def.ghi")
        logger.info("url https://user:hunter2@hooks.local/x token=tok-555 and custom-sig-998877")
        logger.bind(api_token="zzz-top", detail={"password": "pw-1"}).info("bound")
    finally:
        log.shutdown()
    text = out.read_text()
    for secret in ("s3cr3t-value-123", "abc.def.ghi", "hunter2", "tok-555", "custom-sig-998877", "zzz-top", "pw-1"):
        assert secret not in text, secret
    assert text.count("***") >= 6
    assert log.redact("nothing secret here") == "nothing secret here"


@pytest.mark.long  # 8 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@pytest.mark.slow  # the demo grows with healer (a live healed fleet; its game-day suite is tests/chaos/test_suite.py's)
def test_demo_runs_exits_0_and_keeps_its_fleet_on_request():
    r = healer("demo", "--keep", "--no-suite", timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    for needle in ("1. A fleet", "2. A board", "3. Policies", "ok  policies/default.yaml", "T-4", "expected at most absolute_max"):
        assert needle in r.stdout, needle
    assert "Traceback" not in r.stderr
    kept = Path(r.stdout.split("kept the demo fleet at ")[1].split()[0])
    try:
        s = open_store(kept)
        try:
            assert {"T-1", "T-2", "T-3", "T-4", "T-5"} <= {t.id for t in s.tickets()}
        finally:
            s.close()
    finally:
        shutil.rmtree(kept)  # the folder this test asked the demo to keep
