"""The CLI around the store: init --store, doctor, store migrate, store copy; two fleet roots on one board."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from healer.store import open_url
from tests.conftest import healer, make_repo

SECRET = "s3cret-pw"  # trust auth ignores it; it must never be printed or logged


def with_password(url: str) -> str:
    u = urlsplit(url)
    return urlunsplit((u.scheme, f"{u.username}:{SECRET}@{u.hostname}:{u.port}", u.path, u.query, u.fragment))


def everything_written(root: Path) -> str:
    out = []
    for p in (root / ".healer").rglob("*"):
        if p.is_file() and p.name != "config.yaml":
            out.append(p.read_bytes().decode("utf-8", "replace"))
    return "\n".join(out)


@pytest.mark.campaign  # six CLI runs: about 40 s on a loaded machine
def test_two_roots_share_one_board_and_never_print_the_secret(tmp_path, pg_url):
    url = with_password(pg_url)
    env = {"HEALER_STORE_URL": ""}
    hosts = [make_repo(tmp_path / f"host{i}") for i in (1, 2)]
    for h in hosts:
        r = healer("init", "--store", url, cwd=h, env=env)
        assert r.returncode == 0, r.stderr
        assert SECRET not in r.stdout + r.stderr and "***" in r.stdout
        cfg = h / ".healer" / "config.yaml"
        assert oct(cfg.stat().st_mode & 0o777) == "0o600"
    r = healer("board", "add", "one board", cwd=hosts[0], env=env)
    assert r.returncode == 0, r.stderr
    r = healer("board", "list", "--json", cwd=hosts[1], env=env)
    assert r.returncode == 0, r.stderr
    assert [t["title"] for t in json.loads(r.stdout)] == ["one board"]
    r = healer("doctor", "--json", cwd=hosts[1], env=env)
    store = next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "store")
    assert store["status"] == "ok" and "PostgreSQL 1" in store["detail"], store
    assert SECRET not in r.stdout + r.stderr
    r = healer("store", "migrate", cwd=hosts[0], env=env)
    assert r.returncode == 0 and "already current" in r.stdout, r.stdout + r.stderr
    for h in hosts:
        assert SECRET not in everything_written(h)


def test_env_var_overrides_the_config_and_doctor_fails_on_an_unreachable_server(tmp_path, pg_url):
    root = make_repo(tmp_path / "fleet")
    assert healer("init", cwd=root, env={"HEALER_STORE_URL": ""}).returncode == 0
    dead = "postgresql://healer:" + SECRET + "@127.0.0.1:1/postgres"
    r = healer("doctor", "--json", cwd=root, env={"HEALER_STORE_URL": dead})
    assert r.returncode == 1
    store = next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "store")
    assert store["status"] == "fail" and "cannot connect" in store["detail"]
    assert SECRET not in r.stdout + r.stderr
    r = healer("board", "list", cwd=root, env={"HEALER_STORE_URL": dead})
    assert r.returncode == 69 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert SECRET not in r.stderr


def test_copy_moves_a_sqlite_fleet_to_postgresql(tmp_path, pg_url):
    db = tmp_path / "fleet" / ".healer" / "healer.db"
    src = open_url(f"sqlite:{db}")
    for title in ("a", "b", "c"):
        src.add_ticket(title)
    src.comment("T-2", "with evidence", author="human")
    before = [(e.id, e.kind) for e in src.events()]
    src.close()
    r = healer("store", "copy", "--from", f"sqlite:{db}", "--to", pg_url, "--json", env={"HEALER_STORE_URL": ""})
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert rows["tickets"] == 3 and rows["comments"] == 1 and rows["events"] == len(before)
    r = healer("store", "copy", "--from", f"sqlite:{db}", "--to", pg_url, env={"HEALER_STORE_URL": ""})
    assert r.returncode == 64 and "not empty" in r.stderr  # never into a non-empty store
    dst = open_url(pg_url)
    try:
        assert [t.id for t in dst.tickets()] == ["T-1", "T-2", "T-3"]
        assert [(e.id, e.kind) for e in dst.events()][:len(before)] == before  # ids kept
        assert dst.add_ticket("d").id == "T-4"
        assert dst.append("after") > before[-1][0]  # the id sequence continues after the copied ones
        assert [c.body for c in dst.comments("T-2")] == ["with evidence"]
    finally:
        dst.close()


def test_bad_store_urls_are_one_line_usage_errors(tmp_path):
    root = make_repo(tmp_path / "fleet")
    r = healer("init", "--store", "mysql://x", cwd=root, env={"HEALER_STORE_URL": ""})
    assert r.returncode == 64 and "expected postgresql://" in r.stderr and len(r.stderr.strip().splitlines()) == 1
