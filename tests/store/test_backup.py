"""`healer store backup FILE` / `healer store restore FILE` on either dialect (issue 33): the file is an SQLite store
file, so a PostgreSQL board restores into SQLite and the other way round; a restore into PostgreSQL replaces the
board in one transaction after keeping the board there now in a file; a foreign fleet's board is refused with one
line unless --other-fleet. Real git repositories, a real PostgreSQL schema, the real CLI."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from healer.store import backup, identity, open_url
from tests.conftest import git, make_repo


def _cli(root: Path, *args: str, url: str | None = None):
    env = {k: v for k, v in os.environ.items() if k != "HEALER_STORE_URL"}
    env["NO_COLOR"] = "1"
    if url:
        env["HEALER_STORE_URL"] = url
    return subprocess.run([sys.executable, "-m", "healer", *args, "--root", str(root)], capture_output=True, text=True,
                          env=env, timeout=120)


def _titles(r) -> str:
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def _one_line(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.long  # 17 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_backup_then_restore_on_postgresql_keeps_the_board_it_replaces(tmp_path, pg_url):
    root = make_repo(tmp_path / "fleet")
    assert _cli(root, "init", "--store", pg_url).returncode == 0
    assert _cli(root, "board", "add", "kept").returncode == 0
    file = tmp_path / "board.db"
    r = _cli(root, "store", "backup", str(file))
    assert r.returncode == 0 and "backed up" in r.stdout, r.stdout + r.stderr
    assert _cli(root, "store", "backup", str(file)).returncode != 0  # never overwrites a file
    assert _cli(root, "board", "add", "added after the backup").returncode == 0
    r = _cli(root, "store", "restore", str(file))
    assert r.returncode == 0, r.stdout + r.stderr
    out = _titles(_cli(root, "board", "list"))
    assert "kept" in out and "added after the backup" not in out
    kept = list((root / ".healer").glob("store-before-restore-*.db"))
    assert len(kept) == 1 and str(kept[0]) in r.stdout
    con = sqlite3.connect(kept[0])
    try:  # nothing deleted that was not kept: the replaced board, whole, in its own file
        assert {t for (t,) in con.execute("SELECT title FROM tickets")} == {"kept", "added after the backup"}
    finally:
        con.close()
    s = open_url(pg_url, root=root)
    try:
        ev = s.events(kinds=["store.restored"])
        assert len(ev) == 1 and ev[0].payload["kept"] == str(kept[0])
        s.add_ticket("after the restore")  # the identity sequences continue after the restored rows
        s.append("after", "the restore")
    finally:
        s.close()


@pytest.mark.long  # 26 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_backup_moves_between_dialects_and_a_foreign_fleet_needs_other_fleet(tmp_path, pg_url):
    lite = make_repo(tmp_path / "lite")
    assert _cli(lite, "init").returncode == 0
    assert _cli(lite, "board", "add", "from sqlite").returncode == 0
    file = tmp_path / "lite.db"
    assert _cli(lite, "store", "backup", str(file)).returncode == 0
    pg = make_repo(tmp_path / "pg")
    assert _cli(pg, "init", "--store", pg_url).returncode == 0
    assert _cli(pg, "board", "add", "the board there now").returncode == 0
    r = _cli(pg, "store", "restore", str(file))
    assert r.returncode == 65 and "another fleet" in _one_line(r) and "--other-fleet" in r.stderr
    assert "the board there now" in _titles(_cli(pg, "board", "list"))  # refused: nothing changed
    r = _cli(pg, "store", "restore", "--other-fleet", str(file))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "from sqlite" in _titles(_cli(pg, "board", "list"))
    assert git(pg, "config", "--get", identity.GIT_KEY) == git(lite, "config", "--get", identity.GIT_KEY)
    # and back: the PostgreSQL board into an SQLite fleet of the same id
    assert _cli(pg, "board", "add", "added on postgresql").returncode == 0
    back = tmp_path / "pg.db"
    assert _cli(pg, "store", "backup", str(back)).returncode == 0
    r = _cli(lite, "store", "restore", str(back))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "added on postgresql" in _titles(_cli(lite, "board", "list"))


def test_a_restore_cut_short_leaves_the_board_as_it_was(tmp_path, pg_url):
    """One transaction: a table that cannot be loaded (two tickets with one id) after others were emptied and
    loaded rolls every table back."""
    s = open_url(pg_url, root=tmp_path)
    try:
        s.add_ticket("there before")
        s.append("note", "x")
        before = backup.snapshot(s)
        tables = dict(before)
        cols, rows = tables["tickets"]
        tables["tickets"] = (cols, [rows[0], rows[0]])
        with pytest.raises(Exception):  # noqa: B017 - the database's own refusal (a unique violation)
            backup.replace(s, tables)
        assert backup.snapshot(s) == before
    finally:
        s.close()
