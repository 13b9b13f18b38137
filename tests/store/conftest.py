"""Store fixtures: every contract test runs against SQLite and PostgreSQL.

PostgreSQL comes from $HEALER_TEST_PG_URL (.ci/run starts a throwaway cluster and exports it), else
from a throwaway cluster this session starts itself when the server binaries are installed
(`chaos/pgcluster.py`). Without either, PostgreSQL tests skip with the reason, except under CI=true
where they fail: CI must prove both backends. Each test gets its own schema, dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from urllib.parse import quote

import pytest

from healer.store import open_url

CI = os.environ.get("CI") == "true"
BACKENDS = ["sqlite", "postgresql"]


def _no_server(reason: str):
    if CI:
        pytest.fail(f"CI=true but {reason}: .ci/run must start PostgreSQL and export HEALER_TEST_PG_URL", pytrace=False)
    pytest.skip(reason=reason)


def _start_cluster():
    from chaos import pgcluster

    if not pgcluster.available():
        _no_server("no PostgreSQL: set HEALER_TEST_PG_URL or install postgresql-15 (initdb, pg_ctl)")
    cluster = pgcluster.Cluster()
    try:
        cluster.start()
    except Exception as e:  # noqa: BLE001 - a local cluster that will not start is a skip (a fail under CI)
        cluster.stop()
        _no_server(f"could not start a throwaway PostgreSQL: {e}")
    return cluster


@pytest.fixture(scope="session")
def pg_cluster():
    """A throwaway cluster this session owns (a game day SIGSTOPs it); stopped and removed at the end."""
    cluster = _start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def pg_server(request):
    """The URL of a PostgreSQL server (no schema chosen): CI's, else one this session starts."""
    url = os.environ.get("HEALER_TEST_PG_URL")
    if url:
        return url
    return request.getfixturevalue("pg_cluster").url


def schema_url(server: str, schema: str) -> str:
    sep = "&" if "?" in server else "?"
    return f"{server}{sep}options={quote('-csearch_path=' + schema)}"


@contextmanager
def fresh_schema(server: str):
    import psycopg

    schema = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema_url(server, schema)
    finally:
        with psycopg.connect(server, autocommit=True) as c:
            c.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def pg_url(pg_server):
    """A fresh, empty fleet schema on the server; dropped at the end of the test."""
    with fresh_schema(pg_server) as url:
        yield url


@pytest.fixture
def own_pg_url(pg_cluster):
    """A fresh fleet schema on the cluster this session owns (for faults that pause the server)."""
    with fresh_schema(pg_cluster.url) as url:
        yield url


@pytest.fixture(params=BACKENDS)
def store_url(request, tmp_path):
    """A store URL of each backend, fresh."""
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'fleet' / '.healer' / 'healer.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def store(store_url, vclock, tmp_path):
    s = open_url(store_url, vclock, root=tmp_path / "fleet")
    yield s
    s.close()
