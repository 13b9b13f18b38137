"""What every part of the store's SQL (healer/store/sql.py and its sql_*.py parts) shares: what a part may use of
the store it is part of (`SqlPart`), JSON as stored, placeholders, a WHERE clause built from optional filters, and
the records built lazily."""

from __future__ import annotations

import json
from collections.abc import Iterable

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing
if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from typing import Any


class SqlPart:
    """The base of each part of the store's SQL (sql_tickets.py, sql_agents.py, sql_attempts.py, sql_outbox.py): the
    whole of what a part uses of the store it is mixed into, declared here so that each part is type-checked alone
    and nothing else is reached for. SqlStore (healer/store/sql.py) defines `now` and `_event`; each adapter
    (healer/store/sqlite.py, healer/store/postgres.py) its connection's hooks."""

    _LIKE: str  # the case-blind LIKE: SQLite's LIKE, PostgreSQL's ILIKE

    def tx(self, *, fenced: bool = True) -> AbstractContextManager[Any]:
        """A write transaction (fenced: the held lease is checked in it), yielding the adapter's connection."""
        raise NotImplementedError

    def _q(self, sql: str, args: Iterable[Any] = ()) -> list:
        """The rows of a read, outside any write transaction."""
        raise NotImplementedError

    def _for_update(self, sql: str) -> str:
        """`sql` (a SELECT inside a write transaction) locking the rows it reads until COMMIT."""
        raise NotImplementedError

    def _skip_locked(self, sql: str) -> str:
        """`sql` (a SELECT that claims rows) skipping the rows another transaction holds."""
        raise NotImplementedError

    def now(self) -> float:
        raise NotImplementedError

    def _event(self, db: Any, kind: str, subject: str, payload: dict | None, at: float | None = None) -> int:
        """Append an event inside the transaction `db`; its id."""
        raise NotImplementedError


class _Records:
    """healer.records, imported the first time a row becomes a record: `healer loop run` only appends
    events and heartbeats, and building the records' ten dataclasses costs more CPU than its git work
    (`python -X importtime` on the 2-core dev machine: healer.records takes about 10 ms, 8 of them its own)."""

    def __getattr__(self, name: str):
        from healer import records  # lazy: healer.records, ~10 ms of `healer loop run` (see above)

        value = getattr(records, name)
        setattr(self, name, value)  # later lookups are plain attribute reads
        return value


_rec = _Records()


def _j(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


def _placeholders(n: int) -> str:
    return ",".join("?" * n)


class _Where:
    """A WHERE clause built from optional filters: a filter given as None is left out."""

    def __init__(self) -> None:
        self.terms: list[str] = []
        self.args: list[Any] = []

    def add(self, term: str, value: Any) -> _Where:
        if value is not None:
            self.terms.append(term)
            self.args.append(value)
        return self

    def among(self, column: str, values: Iterable[Any] | None) -> _Where:
        if values is not None:
            values = list(values)
            # `IN ()` is SQLite's; PostgreSQL refuses it: an empty list matches nothing, in both
            self.terms.append(f"{column} IN ({_placeholders(len(values))})" if values else "1 = 0")
            self.args += values
        return self

    def sql(self) -> str:
        return (" WHERE " + " AND ".join(self.terms)) if self.terms else ""
