"""Shared fixtures: real git repositories, real SQLite stores, clocks.

Each area keeps its own fixtures in tests/<area>/conftest.py.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from healer.clock import VirtualClock, system
from healer.store import open_store

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable

GIT_ENV = {
    "GIT_AUTHOR_NAME": "healer-test",
    "GIT_AUTHOR_EMAIL": "test@healer.invalid",
    "GIT_COMMITTER_NAME": "healer-test",
    "GIT_COMMITTER_EMAIL": "test@healer.invalid",
}
os.environ.update(GIT_ENV)
# healer's cache of validated policies (healer/policy/cache.py): one private folder per test session,
# removed at its end, so tests neither read a stale home cache nor leave one behind
_CACHE_DIR = tempfile.mkdtemp(prefix="healer-test-cache-")
os.environ["HEALER_CACHE_DIR"] = _CACHE_DIR
# also when no session runs (a usage error, --collect-only): conftest is imported before either
atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _private_cache_dir():
    yield
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A real git repository on branch main with one commit."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "test@healer.invalid")
    git(path, "config", "user.name", "healer-test")
    for name, text in (files or {"README.md": "# demo\n"}).items():
        f = path / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    (path / ".gitignore").write_text(".healer/\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


def healer(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 120, input: str | None = None):
    """Run the real CLI in a child process."""
    full = {**os.environ, **(env or {})}
    return subprocess.run([PY, "-m", "healer", *args], cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=timeout, input=input)


def wait_until(cond, timeout: float = 60.0, what="condition", poll: float = 0.05):
    """Poll `cond` until it returns something truthy (returned), or fail the test after
    `timeout` seconds. `what` (a string, or a callable giving one at failure) names the wait.
    The timeout is a budget, not a measurement: CI's 2 cores are shared and loaded, so keep it generous
    (a condition that holds returns at once; only a failing test waits the budget out)."""
    clock = system()
    end = clock.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if clock.monotonic() >= end:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what() if callable(what) else what}")
        clock.sleep(poll)


def need_root() -> None:
    """Mounting a tmpfs (a disk that fills) needs root and mount(8): CI has both and never skips."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs as root with mount(8): this test must run there")
        pytest.skip(reason="needs root and mount(8) for a tmpfs / read-only bind mount")


@pytest.fixture
def tiny_disk(tmp_path):
    """A 24 MB tmpfs: a disk a test can fill (fill_disk), unmounted at the end."""
    need_root()
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)
        if os.path.ismount(disk):
            subprocess.run(["umount", "-l", str(disk)], check=False)


def fill_disk(path) -> None:
    """Write `path` until its disk refuses one more byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 20, 4096, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError:
                    break
    finally:
        os.close(fd)


@pytest.fixture
def vclock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def store(tmp_path: Path, vclock: VirtualClock):
    s = open_store(tmp_path / "fleet", vclock)
    yield s
    s.close()


def pytest_unconfigure(config):
    """pytest removes a passing session's tmp_path folders (tmp_path_retention_policy = failed) but keeps
    their parent, /tmp/pytest-of-USER: gone too when empty (another session's folders keep it)."""
    factory = getattr(config, "_tmp_path_factory", None)
    base = getattr(factory, "_basetemp", None)
    if base is not None and base.parent.name.startswith("pytest-of-"):
        try:
            base.parent.rmdir()
        except OSError:
            pass
