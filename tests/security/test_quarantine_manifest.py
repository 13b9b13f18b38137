"""Quarantine manifests are data an agent may have written: validated and confined, one bad
manifest is one line and skipped, never an exit 70, never a move from outside the root."""

from __future__ import annotations

import json
import os
import stat

from healer import quarantine as q
from healer.init import init_fleet
from tests.conftest import healer, make_repo


def test_forged_and_malformed_manifests(tmp_path):
    root = make_repo(tmp_path / "fleet")
    init_fleet(root)
    keep = tmp_path / "x" / "keep.txt"
    keep.parent.mkdir()
    keep.write_text("outside the fleet\n")
    # a genuine batch, restorable
    (root / "note.txt").write_text("mine\n")
    good = q.quarantine(root, "note.txt", "test")
    # the hostile agent's forgeries (the same code the agent runs in its worktree)
    from chaos.agents import hostile

    cwd = os.getcwd()
    os.chdir(root)
    try:
        hostile.manifest(str(keep))
    finally:
        os.chdir(cwd)
    (root / ".healer" / "quarantine" / "20200101T000002Z").mkdir()
    (root / ".healer" / "quarantine" / "20200101T000002Z" / "manifest.json").write_text("{not json")

    ls = healer("quarantine", "list", cwd=root)
    assert ls.returncode == 0, ls.stderr
    assert good.batch in ls.stdout and "stolen" not in ls.stdout
    bad_lines = [ln for ln in ls.stderr.splitlines() if "skipped" in ln]
    assert len(bad_lines) == 3 and all("Traceback" not in ln for ln in ls.stderr.splitlines())

    forged = healer("quarantine", "restore", "20200101T000000Z", cwd=root)
    assert forged.returncode == 65, forged.stdout + forged.stderr
    assert len(forged.stderr.strip().splitlines()) == 1 and "stored" in forged.stderr
    assert keep.read_text() == "outside the fleet\n" and not (root / "stolen.txt").exists()
    malformed = healer("quarantine", "restore", "20200101T000001Z", cwd=root)
    assert malformed.returncode == 65 and "Traceback" not in malformed.stderr

    ok = healer("quarantine", "restore", good.batch, cwd=root)
    assert ok.returncode == 0, ok.stderr
    assert (root / "note.txt").read_text() == "mine\n"
    assert json.loads((root / ".healer" / "quarantine" / good.batch / "manifest.json").read_text())


def test_a_fifo_an_agent_left_is_quarantined_and_restored_without_blocking(tmp_path):
    """Hashing opens what it quarantines: a FIFO (no writer) used to block the supervisor's pass for ever."""
    root = make_repo(tmp_path / "fleet")
    init_fleet(root)
    os.mkfifo(root / "pipe")
    (e,) = q.quarantine_many(root, ["pipe"], "unknown file")
    assert not os.path.lexists(root / "pipe") and e.size == 0
    (back,) = q.restore(root, e.batch)
    assert back.state == "restored" and stat.S_ISFIFO(os.lstat(root / "pipe").st_mode)
