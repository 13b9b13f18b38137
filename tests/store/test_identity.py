"""A store has an identity (issue 33): a fleet id in the store and in the fleet's git config. A 0-byte, deleted or
foreign store is refused with one line (exit 74 / 65) instead of silently becoming an empty board; `healer init
--new-board` starts over on purpose (old file kept, ticket ids continue after the old board's); `healer store
restore FILE` puts a copy back. A damaged store ends commands and daemons with one line and exit 74, and
`healer doctor` says how to recover it. Real git repositories, real SQLite files, the real CLI."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from healer.store import identity
from tests.conftest import git, healer, make_repo


def _env():
    return {k: v for k, v in os.environ.items() if k != "HEALER_STORE_URL"}


def _fleet(tmp_path: Path) -> Path:
    root = make_repo(tmp_path / "fleet")
    r = healer("init", "--root", str(root), env=_env())
    assert r.returncode == 0, r.stderr
    return root


def _cli(root: Path, *args: str):
    full = {**_env(), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "healer", *args, "--root", str(root)], capture_output=True, text=True,
                          env=full, timeout=120)


def _one_line(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_the_rule():
    assert identity.judge(None, None, exists=False, empty=True) == ("stamp", None)
    assert identity.judge(None, "a", exists=True, empty=False) == ("adopt", None)
    assert identity.judge("a", "a", exists=True, empty=False) == ("ok", None)
    assert identity.judge("a", None, exists=False, empty=True) == ("missing", 74)
    assert identity.judge("a", None, exists=True, empty=True) == ("empty", 74)
    assert identity.judge("a", None, exists=True, empty=False) == ("empty", 74)
    assert identity.judge("a", "b", exists=True, empty=False) == ("foreign", 65)


def test_init_writes_one_id_into_the_store_and_into_git(tmp_path):
    root = _fleet(tmp_path)
    gid = git(root, "config", "--local", "--get", identity.GIT_KEY)
    con = sqlite3.connect(root / ".healer" / "healer.db")
    (value,) = con.execute("SELECT value FROM settings WHERE key=?", (identity.SETTING,)).fetchone()
    con.close()
    assert gid and value == f'"{gid}"'


@pytest.mark.long  # 20 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@pytest.mark.parametrize("how", ["truncated", "deleted"])
def test_a_lost_store_is_refused_and_no_id_is_reused(tmp_path, how):
    root = _fleet(tmp_path)
    assert _cli(root, "board", "add", "first").returncode == 0
    git(root, "branch", "healer/T-1")  # the old board's ticket left its branch (and, say, a worktree)
    (root / ".healer" / "worktrees" / "T-2").mkdir(parents=True)
    db = root / ".healer" / "healer.db"
    if how == "truncated":
        db.write_bytes(b"")
    else:
        for p in root.joinpath(".healer").glob("healer.db*"):
            p.unlink()
    for args in (("board", "add", "second"), ("board", "list"), ("status",)):
        r = _cli(root, *args)
        assert r.returncode == 74, (args, r.stdout, r.stderr)
        line = _one_line(r)
        assert "this fleet had" in line and "healer init --new-board" in line and "healer store restore" in line
    assert not db.exists() or db.stat().st_size == 0, "a refused store was made anew"
    # `healer init` does not make it anew either; `--new-board` does, on purpose, and keeps the old file
    assert _cli(root, "init").returncode == 74
    r = _cli(root, "init", "--new-board")
    assert r.returncode == 0, r.stderr
    if how == "truncated":
        assert list(root.joinpath(".healer").glob("healer.db.old-*")), "the old file was not kept"
    r = _cli(root, "board", "add", "third")
    assert r.returncode == 0, r.stderr
    assert "T-3" in r.stdout, r.stdout  # T-1 (branch) and T-2 (worktree) are the old board's


def test_a_foreign_store_is_refused_with_65(tmp_path):
    a, b = _fleet(tmp_path / "a"), _fleet(tmp_path / "b")
    shutil.copyfile(b / ".healer" / "healer.db", a / ".healer" / "healer.db")
    r = _cli(a, "board", "list")
    assert r.returncode == 65, r.stderr
    assert "belongs to another fleet" in _one_line(r)
    r = _cli(a, "store", "restore", str(b / ".healer" / "healer.db"))
    assert r.returncode == 65 and "another fleet" in _one_line(r)


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_store_restore_puts_a_copy_back(tmp_path):
    root = _fleet(tmp_path)
    assert _cli(root, "board", "add", "kept").returncode == 0
    backup = tmp_path / "backup.db"
    con, out = sqlite3.connect(root / ".healer" / "healer.db"), sqlite3.connect(backup)
    con.backup(out)
    con.close()
    out.close()
    (root / ".healer" / "healer.db").write_bytes(b"")
    assert _cli(root, "board", "list").returncode == 74
    r = _cli(root, "store", "restore", str(backup))
    assert r.returncode == 0, r.stderr
    r = _cli(root, "board", "list")
    assert r.returncode == 0 and "kept" in r.stdout, r.stdout + r.stderr


def _damage(db: Path) -> None:
    """Overwrite interior pages of the store (the header and the schema page stay: it still opens)."""
    size = db.stat().st_size
    with open(db, "r+b") as f:
        page = 4096
        for off in range(2 * page, size, page):
            f.seek(off)
            f.write(b"\xff" * 64)


def _corrupt_fleet(tmp_path: Path) -> Path:
    from healer.store import open_store

    root = _fleet(tmp_path)
    s = open_store(root)
    for i in range(30):
        s.add_ticket(f"ticket {i} " + "x" * 200)
    s.close()
    db = root / ".healer" / "healer.db"
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    _damage(db)
    return root


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_damaged_store_is_one_line_and_74_and_doctor_says_how_to_recover(tmp_path):
    root = _corrupt_fleet(tmp_path)
    r = _cli(root, "board", "list")
    assert r.returncode == 74, r.stdout + r.stderr
    assert "damaged" in _one_line(r)
    r = _cli(root, "doctor")
    assert ".recover" in r.stdout + r.stderr and "healer store restore" in r.stdout + r.stderr, r.stdout + r.stderr


def test_up_on_a_damaged_store_ends_with_one_line_and_74(tmp_path):
    root = _corrupt_fleet(tmp_path)
    r = subprocess.run([sys.executable, "-m", "healer", "up", "--root", str(root)], capture_output=True, text=True,
                       env=_env(), timeout=120)
    assert r.returncode == 74, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert "damaged" in r.stderr and ".recover" in r.stderr, r.stderr


@pytest.mark.long  # 5 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_on_postgresql_a_second_host_joins_and_another_fleet_is_refused(tmp_path, pg_url):
    a, b = make_repo(tmp_path / "host-a"), make_repo(tmp_path / "host-b")
    for root in (a, b):  # the same board from two hosts' clones: the second takes the board's id
        r = _cli(root, "init", "--store", pg_url)
        assert r.returncode == 0, r.stderr
    assert git(a, "config", "--get", identity.GIT_KEY) == git(b, "config", "--get", identity.GIT_KEY)
    other = _fleet(tmp_path / "other")  # a fleet with a board of its own, pointed at this one's
    r = _cli(other, "init", "--store", pg_url)
    assert r.returncode == 65, r.stderr
    assert "belongs to another fleet" in _one_line(r)
    assert "store" not in (other / ".healer" / "config.yaml").read_text() if (other / ".healer" / "config.yaml").exists() else True


def test_a_linked_worktree_is_no_fleet_root(tmp_path):
    """A worktree shares its repository's config: a loop run's own store there is not judged by the fleet's id
    (it was refused as a lost board: tests/security/test_history.py runs loops in two worktrees of one repo)."""
    repo = make_repo(tmp_path / "repo")
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", "-b", "w", str(tmp_path / "wt")], check=True)
    assert identity.in_git(repo)
    assert not identity.in_git(tmp_path / "wt")


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_store_damaged_while_up_runs_ends_it_with_one_line_and_74(tmp_path):
    """Pages damaged under a running `healer up` (no tickets: nothing else to do): the next pass that reads them
    ends it with the one recovery line and exit 74, no courier or pass line besides."""
    import yaml

    from tests.conftest import wait_until

    agent = Path(__file__).resolve().parents[2] / "chaos" / "agents" / "fleet_agent.py"
    cmd = [sys.executable, str(agent), "--task", "{task_file}", "--workdir", "{workdir}", "--run-id", "{run_id}"]
    root = make_repo(tmp_path / "fleet", {"README.md": "# x\n", "healer.yaml": yaml.safe_dump(
        {"fleet": {"dispatch_tick": "1s", "loop_command": cmd}, "supervisor": {"tick": "1s"}})})
    assert _cli(root, "init").returncode == 0
    from healer.store import open_store

    s = open_store(root)
    for i in range(30):
        s.set_setting(f"filler.{i}", "x" * 400)  # pages to damage beyond the schema's
    s.close()
    log = root / ".healer" / "up.log"
    with open(log, "wb") as out:
        up = subprocess.Popen([sys.executable, "-m", "healer", "up", "--root", str(root)], env=_env(), stdout=out,
                              stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "dispatcher and supervisor running" in log.read_text() or up.poll() is not None, 120, "up running")
        db = root / ".healer" / "healer.db"
        con = sqlite3.connect(db)
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
        _damage(db)
        code = up.wait(120)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    text = log.read_text()
    lines = [ln for ln in text.splitlines() if ln.strip() and "dispatcher and supervisor running" not in ln]
    assert code == 74, text
    assert len(lines) == 1 and "damaged" in lines[0] and ".recover" in lines[0] and "Traceback" not in text, text
