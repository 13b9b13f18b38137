"""Fixtures for the repair agent: a real fleet root (git repo + .healer store) seeded in the past.

The MCP server runs as a real child process on the system clock, so seeding uses a
VirtualClock set `hours` before the real now: what was seeded looks that old.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest

from healer.clock import VirtualClock, system
from healer.policy import load_policy
from healer.store import open_store
from tests.conftest import make_repo

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir(exist_ok=True)
    open_store(root).close()
    return root


def write_policy(root: Path, text: str):
    (root / "healer.yaml").write_text(text)
    return load_policy(root / "healer.yaml")


def past_store(root: Path, hours: float = 6.0):
    """A store whose clock reads `hours` ago, for seeding an old, stuck fleet."""
    clock = VirtualClock(system().now() - hours * 3600)
    return open_store(root, clock), clock


def seed_frozen(store, n: int, prefix: str = "F") -> list[str]:
    ids = []
    for i in range(1, n + 1):
        t = store.add_ticket(f"frozen {i}", id=f"{prefix}-{i}", state="queued")
        store.move_ticket(t.id, "in_progress", actor="dispatcher")
        ids.append(t.id)
    return ids


def seed_stale(store, n: int, prefix: str = "S", label: str = "to-review") -> list[str]:
    ids = []
    for i in range(1, n + 1):
        t = store.add_ticket(f"awaiting review {i}", id=f"{prefix}-{i}", state="queued")
        store.move_ticket(t.id, "in_progress", actor="dispatcher")
        store.move_ticket(t.id, "review", actor="dispatcher")
        store.label(t.id, label, actor="dispatcher")
        ids.append(t.id)
    return ids


def tree_hash(path: Path) -> str:
    """Names, modes, link targets and contents of everything under `path`."""
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")) + [path]:
        st = p.lstat()
        h.update(f"{p.relative_to(path.parent)}|{st.st_mode}|".encode())
        if p.is_symlink():
            h.update(os.readlink(p).encode())
        elif p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("HEALER_FAILPOINTS", None)
    return env
