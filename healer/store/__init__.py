"""The store: `open_store(root)` opens `.healer/healer.db` under a fleet root."""

from __future__ import annotations

from pathlib import Path

from healer.clock import Clock
from healer.store.base import Store
from healer.store.sqlite import SqliteStore

HEALER_DIR = ".healer"
DB_NAME = "healer.db"


def db_path(root: str | Path) -> Path:
    return Path(root) / HEALER_DIR / DB_NAME


def open_store(root: str | Path = ".", clock: Clock | None = None) -> SqliteStore:
    root = Path(root).resolve()
    return SqliteStore(db_path(root), clock, root=root)


__all__ = ["DB_NAME", "HEALER_DIR", "SqliteStore", "Store", "db_path", "open_store"]
