"""The store's connection killed mid-merge (issue 33), real mode: two real `healer up` hosts on a PostgreSQL server
of the game day's own (chaos/pgday.py). The first host to merge stops itself inside the merge's store transaction
(failpoint `dispatch.merge_recorded=stop@1`, the shared main already pushed); the `pg_kill_mid_merge` fault ends
its backends (pg_terminate_backend), holds it until the supervisor has ticked three times, and lets it go on.

With healer: the transaction rolls back whole, the merge is finished once from the shared main's trailer, no `up`
exits, every ticket done with its work on the shared main once, nothing escalated. With `--disable` (switch
`merge_tx` off and no review grace) the ticket whose merge was cut short is closed as a zombie: exactly `every ticket
done` and `each ticket's work on the shared main exactly once` break. `make test` runs a short variant (three
tickets) with healer; the full scenario runs both ways as a campaign.
"""

from __future__ import annotations

import os

import pytest

from chaos import engine, pgcluster
from chaos.scenario import discover, load

pytestmark = pytest.mark.skipif(not pgcluster.available() and os.environ.get("CI") != "true",
                                reason="no PostgreSQL binaries (initdb, pg_ctl) or no `postgres` user here")


def _scenario():
    return load(discover(["pg-killed-mid-merge-real"])[0])


def _faults(r) -> list[str]:
    return [a.output for a in r.activities if a.type == "action"]


@pytest.mark.long  # 21 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@pytest.mark.timeout(300)
def test_a_host_whose_connection_is_killed_mid_merge_finishes_the_merge_once(tmp_path):
    sc = _scenario()
    sc = sc.model_copy(update={"hosts": sc.hosts.model_copy(update={"tickets": 3}),
                               "expect": [c for c in sc.expect if c.title != "every ticket done"]})
    r = engine.run(sc, tmp_path)
    assert r.ok, r.error or "\n".join(c.message for c in r.failures)
    assert r.stats["up_exits"] == 0 and r.stats["final_exits"] == {"pgday-h1": 0, "pgday-h2": 0}
    (out,) = _faults(r)
    assert "stopped mid-merge" in out and "backend(s) terminated" in out, out
    assert r.steady_after == {"done": 3, "total": 3}


@pytest.mark.campaign
@pytest.mark.timeout(900)
@pytest.mark.parametrize("disabled", [False, True], ids=["healer", "disabled"])
def test_pg_killed_mid_merge_real(tmp_path, disabled):
    sc = _scenario()
    r = engine.run(sc, tmp_path, disabled=disabled)
    assert [a.status for a in r.activities if a.type == "action"] == ["succeeded"], _faults(r)
    if not disabled:
        assert r.ok, r.error or "\n".join(c.message for c in r.failures)
        return
    assert r.status == "failed", r.error
    broken = {c.name for c in r.failures}
    assert sc.broke_as_declared(broken), "\n".join(c.message for c in r.failures)
    assert any("not done (closed)" in m for c in r.failures for m in [c.message]), [c.message for c in r.failures]
