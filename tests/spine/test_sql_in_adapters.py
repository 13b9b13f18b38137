"""SQL lives in the store adapters only (issue 35): healer/store/ speaks to SQLite and PostgreSQL, nothing else does.

Read from the source's syntax tree (not a run): outside healer/store/, no module imports sqlite3 or psycopg, reaches
into a store's connection (`._db`), or holds SQL in a string (a statement's opening words: SELECT … FROM, INSERT
INTO, UPDATE … SET, DELETE FROM, CREATE/DROP, PRAGMA; docstrings and comments are prose and not read). What a
caller needs from a store is a method of the port (healer/store/base.py), where both dialects implement it.
The few exceptions are listed in ALLOWED with their reason; a file that no longer does any of what its entry
allows fails the test too, so the list only shrinks. And inside the adapters, no statement is rewritten at run time: the PostgreSQL
store has no regular expressions, and the migrations' SQLite text is byte for byte what shipped.
"""

from __future__ import annotations

import ast
import hashlib
import re

from tests.spine.conftest import REPO

ROOTS = ("healer", "chaos", "bench")
ADAPTERS = "healer/store/"
SQL = re.compile(r"\b(SELECT\s+[\w*,.\s\"()]+?\s+FROM\s|INSERT\s+(OR\s+\w+\s+)?INTO\s|UPDATE\s+\w+\s+SET\s|DELETE\s+FROM\s"
                 r"|CREATE\s+(TEMP\s+)?(TABLE|TRIGGER|INDEX|SCHEMA)\s|DROP\s+(TABLE|SCHEMA)\s|PRAGMA\s+\w+)", re.I)

# file -> (what it may do, why)
ALLOWED: dict[str, tuple[frozenset[str], str]] = {
    "healer/errors.py": (frozenset({"sqlite3"}),
                         "classifies the SQLite driver's exceptions (a damaged file, a busy lock) raised through any caller; "
                         "no SQL, no connection"),
    "chaos/pgday.py": (frozenset({"psycopg", "sql"}),
                       "the pg_kill_mid_merge fault ends a host's backends with pg_terminate_backend on the server, as an "
                       "operator's psql would: a fault on the database server, not a read or write of the board"),
    "bench/store_backends.py": (frozenset({"psycopg", "sql"}),
                                "creates and drops the throwaway schema each measured fleet lives in (the server's business, "
                                "as tests/store/conftest.py does), before any store is opened"),
    "bench/supervisor_tick.py": (frozenset({"_db", "sql"}),
                                 "its metric is the tick's cost over a bare `SELECT *` on the store's own connection "
                                 "(tick_over_bare_read): the baseline has to be bare SQL"),
}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def findings(path) -> dict[str, list[str]]:
    """What of the four a module does: {'sqlite3'|'psycopg'|'_db'|'sql': ['line: excerpt', ...]}."""
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    found: dict[str, list[str]] = {}

    def note(kind: str, node: ast.AST, text: str) -> None:
        found.setdefault(kind, []).append(f"{getattr(node, 'lineno', '?')}: {text[:80]}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in ("sqlite3", "psycopg", "psycopg2"):
                    note("sqlite3" if a.name == "sqlite3" else "psycopg", node, f"import {a.name}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("sqlite3", "psycopg", "psycopg2"):
            note("sqlite3" if node.module == "sqlite3" else "psycopg", node, f"from {node.module} import ...")
        elif isinstance(node, ast.Attribute) and node.attr == "_db":
            note("_db", node, "._db")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            m = SQL.search(node.value)
            if m:
                note("sql", node, node.value[max(0, m.start() - 10):m.end() + 30].replace("\n", " "))
    return found


def _modules():
    for root in ROOTS:
        for p in sorted((REPO / root).rglob("*.py")):
            rel = p.relative_to(REPO).as_posix()
            if not rel.startswith(ADAPTERS):
                yield rel, p


def test_no_sql_sqlite3_psycopg_or_store_connection_outside_the_adapters():
    bad, unused = [], []
    for rel, p in _modules():
        got = findings(p)
        allowed = ALLOWED.get(rel, (frozenset(), ""))[0]
        for kind, where in got.items():
            if kind not in allowed:
                bad += [f"{rel}:{w} ({kind})" for w in where]
        if rel in ALLOWED and not allowed & set(got):
            unused.append(rel)
    assert not bad, ("SQL or a database driver outside healer/store/ (add a store method to the port, "
                     "healer/store/base.py, and call it):\n" + "\n".join(bad))
    assert not unused, "ALLOWED lists files that no longer need it: remove their entries\n" + "\n".join(unused)


def test_the_check_sees_each_kind():
    """The grep sees what it is for (so an empty result means something)."""
    import tempfile
    from pathlib import Path

    src = ('"""A docstring may say SELECT * FROM tickets."""\nimport sqlite3\nfrom psycopg import sql\n'
           'def f(store):\n    store._db.execute("SELECT id FROM tickets WHERE id=?")\n'
           '    return f"INSERT INTO labels VALUES ({1})", "UPDATE agents SET state=?", "PRAGMA quick_check"\n')
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "m.py"
        p.write_text(src)
        got = findings(p)
    assert set(got) == {"sqlite3", "psycopg", "_db", "sql"}
    assert len(got["sql"]) == 4  # the docstring is not counted


def test_the_postgresql_store_rewrites_no_sql():
    """PgStore no longer translates SQLite's statements: no regular expressions in the adapters that run SQL."""
    for name in ("postgres.py", "sqlite.py"):
        tree = ast.parse((REPO / ADAPTERS / name).read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert "re" not in imported, f"{name} imports re: statements are written per dialect, not rewritten"


def test_the_migrations_are_the_text_that_shipped():
    """Types are slots filled per dialect; the result is byte for byte the schema both stores were built with
    (SQLite's as written before, PostgreSQL's as the old type mapping made it)."""
    from healer.store.migrations import MIGRATIONS, PG_MIGRATIONS

    assert hashlib.sha256("".join(MIGRATIONS[:4]).encode()).hexdigest() == \
        "069c915f13acec2a7f18edbd55c28bd38b3b3e433bd65184503ef0b1add78641"
    assert hashlib.sha256("".join(PG_MIGRATIONS[:4]).encode()).hexdigest() == \
        "a3a4d84f8df4fd8d67c2fe12101e3d8c6e69783436f779e348510d8f9c7227d9"
    # v5 (issue 44: adopted loops), as it shipped
    assert hashlib.sha256(MIGRATIONS[4].encode()).hexdigest() == "da72e29be4ea58fdbe3a3b87ec423b62f97498c0c01b24dfd8806b503c7c4a03"
    assert hashlib.sha256(PG_MIGRATIONS[4].encode()).hexdigest() == "e23aa2af0eabadbe0221e7349f6edf92ad4b8962889d396567645bd23aa11d90"
