"""A damaged store: SQLite pages that do not parse ("database disk image is malformed"). Not an outage to ride out
(it does not heal by waiting) and not healer's bug: every daemon ends with one line and exit 74, and `healer doctor`
says how to recover (SQLite's `.recover` into a new file, keeping the damaged one, then `healer store restore`)."""

from __future__ import annotations

# the class and the test live in healer.errors (which every entry point's last-resort handler imports); re-exported
from healer.errors import StoreCorrupt, corrupt

__all__ = ["StoreCorrupt", "corrupt", "recover_hint", "raise_if_corrupt"]


def recover_hint(path: str) -> str:
    return (f"recover with `sqlite3 {path} .recover | sqlite3 {path}.recovered` (the damaged file is kept), "
            f"then `healer store restore {path}.recovered`; `healer doctor` checks it")


def raise_if_corrupt(store, e: BaseException) -> None:
    """StoreCorrupt (one line, exit 74) when `e` says the store's file is damaged."""
    if corrupt(e) and not isinstance(e, StoreCorrupt):
        path = getattr(store, "path", "the store")
        raise StoreCorrupt(f"{path}: the store is damaged ({str(e).strip().splitlines()[0]}); stopping: "
                           + recover_hint(path)) from e
