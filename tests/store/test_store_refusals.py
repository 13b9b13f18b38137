"""A store that cannot be used is one line with where and why, never "internal error": a read-only .healer/
(74), a file that is no database or one from a newer healer (65), a mistyped sqlite: URL (64, nothing made),
a path that cannot be a store file (64)."""

from __future__ import annotations

import sqlite3
import subprocess

import pytest

from healer.store.migrations import CURRENT
from tests.conftest import healer, make_repo, need_root

ENV = {"HEALER_STORE_URL": "", "HEALER_ROOT": ""}


def _fleet(tmp_path, name: str = "fleet"):
    root = make_repo(tmp_path / name)
    r = healer("init", cwd=root, env=ENV)
    assert r.returncode == 0, r.stderr
    assert healer("board", "add", "A", cwd=root, env=ENV).returncode == 0
    return root


def _one_line(r, code: int, needle: str) -> None:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("healer: ") and needle in lines[0], r.stderr
    assert "internal error" not in r.stderr


@pytest.fixture
def read_only_fleet(tmp_path):
    need_root()
    root = _fleet(tmp_path)
    h = root / ".healer"
    subprocess.run(["mount", "--bind", str(h), str(h)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(h)], check=True)
        yield root
    finally:
        subprocess.run(["umount", str(h)], check=False)


def test_a_read_only_healer_folder_is_exit_74_for_a_write_and_readable_for_a_read(read_only_fleet):
    for cmd in (["board", "add", "x"], ["supervise", "--once"]):
        _one_line(healer(*cmd, cwd=read_only_fleet, env=ENV), 74, "the store's folder takes no writes")
    r = healer("board", "list", "--json", cwd=read_only_fleet, env=ENV)  # a read opens read-only
    assert r.returncode == 0 and '"title": "A"' in r.stdout, r.stderr


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_file_that_is_no_database_or_from_a_newer_healer_is_exit_65_naming_it(tmp_path):
    root = _fleet(tmp_path)
    db = root / ".healer" / "healer.db"
    for extra in ("-wal", "-shm"):
        (root / ".healer" / f"healer.db{extra}").unlink(missing_ok=True)
    db.write_bytes(b"\x13garbage, not SQLite\n" * 300)
    for cmd in (["status"], ["board", "list"], ["journal"], ["store", "info"], ["supervise", "--once"]):
        _one_line(healer(*cmd, cwd=root, env=ENV), 65, f"{db}: not a healer store")
    text = tmp_path / "text.db"
    text.write_text("text\n")
    _one_line(healer("store", "copy", "--from", f"sqlite:{text}", "--to", f"sqlite:{tmp_path / 'c.db'}", env=ENV), 65,
              f"{text}: not a healer store")
    newer = _fleet(tmp_path, "newer")
    c = sqlite3.connect(newer / ".healer" / "healer.db")
    c.execute("PRAGMA user_version=99")
    c.commit()
    c.close()
    for cmd in (["status"], ["board", "add", "y"]):
        _one_line(healer(*cmd, cwd=newer, env=ENV), 65, f"store schema version 99 is newer than this healer ({CURRENT})")
    r = healer("store", "info", cwd=newer, env=ENV)  # its job is to say which version it is
    assert r.returncode == 0 and "schema_version: 99" in r.stdout and "upgrade healer" in r.stdout, r.stderr


def test_a_mistyped_sqlite_url_makes_no_store_but_init_does(tmp_path):
    _one_line(healer("store", "info", "--url", f"sqlite:{tmp_path / 'typo' / 'x.db'}", env=ENV), 64, "no such store file")
    assert not (tmp_path / "typo").exists()
    root = _fleet(tmp_path)
    typo = tmp_path / "typo2.db"
    for cmd in (["board", "list"], ["status"], ["store", "migrate"]):
        _one_line(healer(*cmd, cwd=root, env={**ENV, "HEALER_STORE_URL": f"sqlite:{typo}"}), 64,
                  f"HEALER_STORE_URL: {typo}: no such store file")
    assert not typo.exists()
    _one_line(healer("board", "list", cwd=root, env={**ENV, "HEALER_STORE_URL": "sqlite:"}), 64, "expected postgresql://")
    other = make_repo(tmp_path / "other")
    made = tmp_path / "made.db"
    r = healer("init", cwd=other, env={**ENV, "HEALER_STORE_URL": f"sqlite:{made}"})  # init makes the store it is told
    assert r.returncode == 0 and made.is_file(), r.stderr
    r = healer("board", "list", cwd=other, env={**ENV, "HEALER_STORE_URL": f"sqlite:{made}"})
    assert r.returncode == 0, r.stderr


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_store_path_that_cannot_be_a_store_file_is_exit_64(tmp_path):
    root = _fleet(tmp_path)
    (tmp_path / "afile").write_text("a file\n")
    (tmp_path / "folder").mkdir()
    src = f"sqlite:{root / '.healer' / 'healer.db'}"
    for dst, needle in ((f"sqlite:{tmp_path / 'afile' / 'c.db'}", "afile is a file"),
                        ("sqlite:/proc/x/c.db", "cannot make the store's folder"),
                        (f"sqlite:{tmp_path / 'folder'}", "expected a store file, found a folder")):
        _one_line(healer("store", "copy", "--from", src, "--to", dst, env=ENV), 64, needle)
