"""Move a fleet from one store to another (`healer store copy`): every table, ids kept, into an
empty destination, verified row for row by count; the source is left as it was."""

from __future__ import annotations

from dataclasses import dataclass, field

from healer.errors import UsageError


@dataclass
class CopyReport:
    source: str
    dest: str
    rows: dict[str, int] = field(default_factory=dict)


def copy_store(src, dst, *, actor: str = "human") -> CopyReport:
    rep = CopyReport(getattr(src, "path", "?"), getattr(dst, "path", "?"))
    if src.version() != dst.version():
        raise UsageError(f"schema versions differ (source v{src.version()}, destination v{dst.version()}); "
                         "run `healer store migrate` on both first")
    missing = sorted(set(src.tables()) - set(dst.tables()))
    if missing:
        raise UsageError(f"the destination lacks tables {', '.join(missing)}")
    busy = [t for t in dst.tables() if dst.dump_table(t)[1]]
    if busy:  # nothing is overwritten or merged: a copy goes into an empty store
        raise UsageError(f"{rep.dest}: not empty (rows in {', '.join(busy)}); copy into a new database or schema")
    for t in src.tables():
        cols, rows = src.dump_table(t)
        if rows:
            dst.load_table(t, cols, rows)
        rep.rows[t] = len(rows)
    for t, n in rep.rows.items():
        got = len(dst.dump_table(t)[1])
        if got != n:
            raise UsageError(f"copy check failed: {t} has {got} rows in the destination, {n} in the source")
    dst.append("store.copied", "", {"from": rep.source, "rows": rep.rows, "actor": actor})
    return rep
