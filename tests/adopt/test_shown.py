"""What a person sees of adopted loops: `healer status` (table and --json) and the console's /adopted page list a real
loop adopted by `healer adopt`, then show it gone once its process ended; every value a loop controls (its
worktree's path) is escaped in the page."""

from __future__ import annotations

import json

import pytest

from healer.store import open_store
from tests.adopt.conftest import adopt_json, end, fleet, policy, start, supervisor, until, worktree
from tests.conftest import healer


def _status(root) -> dict:
    r = healer("status", "--json", "--root", str(root))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_status_and_console_list_an_adopted_loop_then_show_it_gone(tmp_path):
    from starlette.testclient import TestClient

    from healer.clock import system
    from healer.console import security
    from healer.console.app import Console, build

    root = fleet(tmp_path / "fleet")
    wt = worktree(tmp_path / "wt<b>")  # a worktree name is the loop's to choose: shown, never markup
    (wt / "loop.sh").write_text("while :; do sleep 1; done\n")
    pol = policy(root)
    assert _status(root)["adopted"] == []
    assert "Adopted loops" not in healer("status", "--root", str(root)).stdout  # nothing adopted: the page as it was
    p = start(["bash", "loop.sh"], wt, {"PATH": "/usr/bin:/bin"})
    try:
        [row] = until(lambda: [x for x in adopt_json(root) if x["pid"] == p.pid])
        assert row["status"] == "adopted"
        [shown] = _status(root)["adopted"]
        assert (shown["id"], shown["pid"], shown["state"], shown["worktree"]) == (row["id"], p.pid, "adopted", str(wt))
        text = healer("status", "--root", str(root)).stdout
        assert "Adopted loops" in text and row["id"] in text

        store = open_store(root)
        try:
            tc = TestClient(build(Console(root, store, pol, system(), security.Access(None, "alice", True))),
                            base_url="http://127.0.0.1")
            [api] = tc.get("/adopted", headers={"Accept": "application/json"}).json()
            assert (api["id"], api["state"]) == (row["id"], "adopted")
            page = tc.get("/adopted").text
            assert row["id"] in page and "wt&lt;b&gt;" in page and "wt<b>" not in page
        finally:
            store.close()
    finally:
        end(p)
    [gone] = [x for x in adopt_json(root) if x["id"] == row["id"]]
    assert gone["status"] == "gone"
    [after] = _status(root)["adopted"]
    assert (after["id"], after["state"]) == (row["id"], "gone") and after["ended_at"] is not None


def test_the_supervisors_metrics_count_the_adopted_loops_running(tmp_path):
    from healer.metrics import Metrics

    root = fleet(tmp_path / "fleet")
    wt = worktree(tmp_path / "wt")
    (wt / "loop.sh").write_text("while :; do sleep 1; done\n")
    pol = policy(root)
    sup = supervisor(root, pol)
    m = Metrics("supervise")
    try:
        m.observe(sup.tick())
        assert "healer_adopted_loops 0.0" in m.render()
        p = start(["bash", "loop.sh"], wt, {"PATH": "/usr/bin:/bin"})
        try:
            rep = until(lambda: (r := sup.tick()) and any(v.adopted.pid == p.pid for v in r.snapshot.adopted) and r)
            m.observe(rep)
            assert "healer_adopted_loops 1.0" in m.render() and "healer_adopted_spend_usd 0.0" in m.render()
        finally:
            end(p)
        m.observe(sup.tick())  # gone: no longer counted
        assert "healer_adopted_loops 0.0" in m.render()
        assert "healer_adopted_loops" not in Metrics("dispatch").render()  # the supervisor's, not the dispatcher's
    finally:
        sup.store.close()


def test_status_of_a_store_not_yet_migrated_to_the_adopted_table_shows_none(tmp_path):
    """`healer status` opens the store read-only, which never migrates: a v4 store (no `adopted` table) shows no
    adopted loop instead of an internal error."""
    import sqlite3

    root = fleet(tmp_path / "fleet")
    db = sqlite3.connect(root / ".healer" / "healer.db")
    db.execute("DROP TABLE adopted")
    db.execute("PRAGMA user_version = 4")
    db.commit()
    db.close()
    r = healer("status", "--json", "--root", str(root))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["adopted"] == []
