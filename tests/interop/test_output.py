"""Output for people and for CI logs: human times in `plan`, no cut at 80 columns when stdout is a pipe."""

from __future__ import annotations

from healer.cli.supervise import human_times
from healer.clock import iso
from tests.conftest import healer, make_repo

T = 1_800_000_000.0


def test_evidence_moments_are_human_times_and_counts_stay_numbers():
    ev = {"ticket": "T-1", "labels": {"to-review": T}, "last_activity": T + 5, "since": T, "attempts": 3, "age_s": 7200.0,
          "agent": {"heartbeat_at": T + 1, "pid": 4242}}
    out = human_times(ev)
    assert out == {"ticket": "T-1", "labels": {"to-review": iso(T)}, "last_activity": iso(T + 5), "since": iso(T), "attempts": 3,
                   "age_s": 7200.0, "agent": {"heartbeat_at": iso(T + 1), "pid": 4242}}


def test_plan_prints_no_epoch_floats(tmp_path):
    root = make_repo(tmp_path / "fleet")
    assert healer("init", "--root", str(root)).returncode == 0
    assert healer("board", "add", "x", "--root", str(root)).returncode == 0
    assert healer("board", "label", "T-1", "to-review", "--root", str(root)).returncode == 0
    from healer.store import open_store

    s = open_store(root)
    with s.tx() as db:
        db.execute("UPDATE labels SET added_at = added_at - 86400")
        db.execute("UPDATE tickets SET updated_at = updated_at - 86400")
    s.close()
    r = healer("plan", "--root", str(root))
    assert r.returncode == 0, r.stderr
    assert "stale_label" in r.stdout and "evidence" in r.stdout
    import re

    assert not re.search(r"\b1[6-9]\d{8}\.\d+", r.stdout), r.stdout


def test_tables_are_not_cut_when_stdout_is_a_pipe():
    r = healer("gameday", "list", env={"COLUMNS": ""})
    assert r.returncode == 0
    assert "…" not in r.stdout and "repair-agent-last-resort" in r.stdout
