"""A board as a portable file: `healer store backup FILE` and `healer store restore FILE`, whichever dialect the
fleet's store is (SQLite or PostgreSQL).

The file is an SQLite store file of the current schema (what `sqlite3` opens, what `.recover` repairs), so a
backup of a PostgreSQL board restores into SQLite and the other way round. A backup reads the board in one
consistent snapshot (PostgreSQL: one REPEATABLE READ transaction). A restore into PostgreSQL replaces every
table's rows in ONE transaction (a restore cut short leaves the board as it was), after the board there now has
been written to a backup file of its own: nothing is deleted that is not kept.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from pathlib import Path

from healer.errors import INVALID_INPUT, HealerError, UsageError
from healer.store import identity
from healer.store.migrations import CURRENT
from healer.store.sqlite import SqliteStore


def copy_file(src: Path, dest: Path) -> None:
    """A consistent copy of SQLite file `src` at `dest`, whatever journal the source has (the online backup API)."""
    a, b = sqlite3.connect(f"file:{src.resolve()}?mode=ro", uri=True), sqlite3.connect(dest)
    try:
        a.backup(b)
    finally:
        a.close()
        b.close()


def snapshot(store) -> dict[str, tuple[list[str], list[tuple]]]:
    """Every table's rows, read in one transaction (one consistent view of the board)."""
    with store.tx(fenced=False):
        store.consistent_read()
        return {t: store.dump_table(t) for t in store.tables()}


def write_file(tables: dict[str, tuple[list[str], list[tuple]]], file: Path, clock=None) -> dict[str, int]:
    """`tables` into a new SQLite store file at `file` (made aside, renamed into place: never half a backup)."""
    file = Path(file)
    if file.exists():
        raise UsageError(f"{file}: already exists (a backup never overwrites a file)")
    tmp = file.with_name(file.name + ".partial")
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(tmp) + suffix).unlink(missing_ok=True)  # our own leftover from a backup cut short
    dst = SqliteStore(tmp, clock)
    try:
        have = set(dst.tables())
        missing = sorted(set(tables) - have)
        if missing:
            raise UsageError(f"this healer's schema lacks tables {', '.join(missing)}: migrate the store first")
        counts = {}
        with dst.tx(fenced=False):
            for t, (cols, rows) in tables.items():
                if rows:
                    dst.load_table(t, cols, rows)
                counts[t] = len(rows)
        dst._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        dst.close()
    for suffix in ("-wal", "-shm"):
        Path(str(tmp) + suffix).unlink(missing_ok=True)  # checkpointed: the main file holds everything
    os.replace(tmp, file)
    return counts


def backup(store, file: Path, clock=None) -> dict[str, int]:
    return write_file(snapshot(store), file, clock)


def read_file(file: Path, clock=None) -> tuple[dict[str, tuple[list[str], list[tuple]]], str | None]:
    """The tables of a backup file (any SQLite healer store: checked sound, brought to this healer's schema on a
    copy, the file itself untouched) and its fleet id. Refusals are one line (exit 65)."""
    src = Path(file)
    if not src.is_file() or src.stat().st_size == 0:
        raise UsageError(f"{file}: no such store file (or an empty one)")
    try:
        con = sqlite3.connect(f"file:{src.resolve()}?mode=ro", uri=True)
        try:
            check = con.execute("PRAGMA integrity_check").fetchone()[0]
            version = con.execute("PRAGMA user_version").fetchone()[0]
            row = con.execute("SELECT value FROM settings WHERE key=?", (identity.SETTING,)).fetchone()
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        raise HealerError(f"{file}: not a healer store ({e})", INVALID_INPUT) from None
    if check != "ok":
        raise HealerError(f"{file}: damaged ({check.splitlines()[0]}); recover it first: `sqlite3 {file} .recover | "
                          f"sqlite3 {file}.recovered`", INVALID_INPUT)
    if version > CURRENT:
        raise HealerError(f"{file}: schema v{version} is newer than this healer's (v{CURRENT}): upgrade healer", INVALID_INPUT)
    fid = json.loads(row[0]) if row else None
    with tempfile.TemporaryDirectory(prefix="healer-restore.") as d:
        tmp = Path(d) / "copy.db"
        copy_file(src, tmp)
        s = SqliteStore(tmp, clock)  # migrated to this healer's schema (the copy, never the file)
        try:
            return snapshot(s), fid
        finally:
            s.close()


def replace(store, tables: dict[str, tuple[list[str], list[tuple]]]) -> dict[str, int]:
    """Every table of `store` holding exactly `tables`' rows, in ONE transaction: cut short (a crash, the server
    gone), the board is as it was. Tables the store has and the backup lacks are emptied."""
    have = set(store.tables())
    missing = sorted(set(tables) - have)
    if missing:
        raise HealerError(f"the store lacks tables {', '.join(missing)}: run `healer store migrate` first", INVALID_INPUT)
    counts = {}
    with store.tx(fenced=False):
        for t in sorted(have):
            store.clear_table(t)
        for t, (cols, rows) in tables.items():
            if rows:
                store.load_table(t, cols, rows)
            counts[t] = len(rows)
    return counts
