"""The shared-repository merge path of the real dispatcher (fleet.shared_remote), on one host with SQLite:
SIGKILLed right after its push, and beaten to the shared main by another host while its gates ran."""

from __future__ import annotations

import sys
from collections import Counter

import pytest
import yaml

from healer.store import open_store
from tests.conftest import git, healer, make_repo, wait_until
from tests.fleet.conftest import scripted_policy
from tests.fleet.test_cli import stop_all
from tests.fleet.test_crash import agents_done


def shared_fleet(tmp_path, merge_gates=(), writable=()):
    seed = make_repo(tmp_path / "seed")
    bare = tmp_path / "shared.git"
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(bare))
    root = tmp_path / "fleet"
    git(tmp_path, "clone", "-q", str(bare), str(root))
    (root / ".healer").mkdir()
    pol = scripted_policy(merge_gates=merge_gates).model_dump(mode="json", by_alias=True)
    pol["fleet"]["shared_remote"] = "origin"
    pol["loop"]["sandbox_writable"] = [str(w) for w in writable]  # the merge gates are sandboxed like the loop's
    (root / "healer.yaml").write_text(yaml.safe_dump(pol, sort_keys=False))
    return bare, root


def trailers(bare) -> Counter:
    log = git(bare, "log", "main", "--format=%B")
    return Counter(x.split(": ", 1)[1] for x in log.splitlines() if x.startswith("Healer-Ticket: "))


@pytest.mark.long  # 5 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_killed_after_the_push_then_restarted_merges_once(tmp_path):
    bare, root = shared_fleet(tmp_path)
    s = open_store(root)
    s.add_ticket("a", id="T-1", body="behaviour: success\n")
    s.close()
    local_main = git(root, "rev-parse", "main")
    try:
        assert healer("dispatch", "--once", "-C", str(root)).returncode == 0
        wait_until(lambda: agents_done(root), what="agent exit")
        r = healer("dispatch", "--once", "-C", str(root), env={"HEALER_FAILPOINTS": "dispatch.after_merge=kill@1"})
        assert r.returncode == -9, r.stderr
        assert trailers(bare) == Counter({"T-1": 1})  # pushed; the board does not know yet
        r = healer("dispatch", "--once", "-C", str(root))
        assert r.returncode == 0, r.stderr
        s = open_store(root)
        t = s.ticket("T-1")
        assert t.state == "done" and [p.state for p in s.proposals("T-1")] == ["merged"]
        s.close()
        assert trailers(bare) == Counter({"T-1": 1})
        assert git(bare, "merge-base", "--is-ancestor", t.data["merged_commit"], "main") == ""
        assert git(root, "rev-parse", "main") == local_main  # the local main is the user's: left alone
    finally:
        stop_all(root)


# a merge gate that, the first time it runs, plays another host: it pushes a commit to the shared main
OTHER_HOST = """
import pathlib, subprocess, sys
bare, other, mark = sys.argv[1:4]
if not pathlib.Path(mark).exists():
    pathlib.Path(mark).write_text("1")
    g = lambda *a, cwd=other: subprocess.run(["git", "-c", "user.name=o", "-c", "user.email=o@o", *a], cwd=cwd, check=True)
    g("clone", "-q", bare, other, cwd=None)
    pathlib.Path(other, "other.txt").write_text("another host\\n")
    g("add", "-A"); g("commit", "-q", "-m", "another host's merge"); g("push", "-q", "origin", "HEAD:main")
"""


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_main_moved_by_another_host_during_the_gates_is_refused_then_merged_on_top(tmp_path):
    other, mark = tmp_path / "other", tmp_path / "marks" / "gate-ran"
    gate = {"name": "race", "run": [sys.executable, "-c", OTHER_HOST, str(tmp_path / "shared.git"), str(other), str(mark)],
            "timeout": "60s"}
    # the gate plays another host: it may write the shared repository, its own clone and its mark
    bare, root = shared_fleet(tmp_path, merge_gates=[gate], writable=[tmp_path / "shared.git", other, mark.parent])
    s = open_store(root)
    s.add_ticket("a", id="T-1", body="behaviour: success\n")
    s.close()
    try:
        assert healer("dispatch", "--once", "-C", str(root)).returncode == 0
        wait_until(lambda: agents_done(root), what="agent exit")
        assert healer("dispatch", "--once", "-C", str(root)).returncode == 0
        s = open_store(root)
        assert s.ticket("T-1").state == "done"
        s.close()
        assert trailers(bare) == Counter({"T-1": 1})
        assert "other.txt" in git(bare, "ls-tree", "--name-only", "main").split()  # the other host's work survived
        assert git(bare, "log", "-1", "--format=%s", "main").startswith("healer: merge")  # ours re-merged on top
    finally:
        stop_all(root)
