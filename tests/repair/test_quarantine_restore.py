"""Restoring from quarantine in process: by path it picks that path's quarantined file and no other, and one
unreadable batch never stops another batch from being restored (the CLI's view: tests/security)."""

from __future__ import annotations

from healer import quarantine as q
from healer.init import init_fleet
from tests.conftest import make_repo


def test_restore_by_path_puts_back_that_file_and_leaves_a_later_batch_quarantined(tmp_path):
    root = make_repo(tmp_path / "fleet")
    init_fleet(root)
    (root / "a.txt").write_text("a\n")
    (root / "b.txt").write_text("b\n")
    a = q.quarantine(root, "a.txt", "test")
    b = q.quarantine(root, "b.txt", "test")
    assert a.batch != b.batch
    assert q.find(root, "a.txt").id == a.id and q.find(root, "b.txt").id == b.id
    (back,) = q.restore(root, "a.txt")
    assert back.path == "a.txt" and back.state == "restored"
    assert (root / "a.txt").read_text() == "a\n" and not (root / "b.txt").exists()
    assert q.find(root, "a.txt") is None  # restored: no longer a quarantined entry for that path
    assert [e.state for e in q.entries(root) if e.path == "b.txt"] == ["quarantined"]


def test_a_malformed_manifest_of_another_batch_does_not_block_restoring_this_one(tmp_path):
    root = make_repo(tmp_path / "fleet")
    init_fleet(root)
    (root / "note.txt").write_text("mine\n")
    good = q.quarantine(root, "note.txt", "test")
    broken = root / ".healer" / "quarantine" / "20200101T000002Z"
    broken.mkdir()
    (broken / "manifest.json").write_text("{not json")
    (back,) = q.restore(root, good.batch)
    assert back.state == "restored" and (root / "note.txt").read_text() == "mine\n"
    # the broken batch itself is refused with the manifest's own line
    try:
        q.restore(root, "20200101T000002Z")
    except q.BadManifest as e:
        assert "20200101T000002Z" in str(e)
    else:
        raise AssertionError("a malformed manifest was restored from")
