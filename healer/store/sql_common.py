"""What every part of the store's SQL (healer/store/sql.py and its sql_*.py parts) shares: JSON as stored,
placeholders, a WHERE clause built from optional filters, and the records built lazily."""

from __future__ import annotations

import json
from collections.abc import Iterable

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing
if TYPE_CHECKING:
    from typing import Any


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
