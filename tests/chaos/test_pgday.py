"""The database's game day (issue 33), real mode: two real `healer up` hosts on a PostgreSQL server of the game day's
own (chaos/pgday.py), the server restarted under them by the `pg_restart` fault (`pg_ctl restart -m fast`).

With healer: no `up` exits, every ticket done with its work on the shared main once, nothing escalated, no page, the
hosts' outages recorded. With `--disable` (store.outage_tolerance 0s: no riding out) exactly `no healer up exits`
breaks. The full scenario (`pg-restarts-real`, two restarts) runs both ways as a campaign; `make test` runs a short
variant of it (four tickets, one restart) once, with healer.
"""

from __future__ import annotations

import os

import pytest

from chaos import engine, pgcluster
from chaos.scenario import discover, load

pytestmark = pytest.mark.skipif(not pgcluster.available() and os.environ.get("CI") != "true",
                                reason="no PostgreSQL binaries (initdb, pg_ctl) or no `postgres` user here")


def _scenario():
    return load(discover(["pg-restarts-real"])[0])


def _short():
    sc = _scenario()
    hosts = sc.hosts.model_copy(update={"tickets": 4})
    expect = [c for c in sc.expect if c.title != "every ticket done"]
    faults = [sc.faults[0].model_copy(update={"nth": 1})]
    return sc.model_copy(update={"hosts": hosts, "faults": faults, "expect": expect})


@pytest.mark.long  # 17 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@pytest.mark.timeout(300)
def test_two_hosts_ride_out_a_pg_restart_game_day(tmp_path):
    r = engine.run(_short(), tmp_path)
    assert r.ok, r.error or "\n".join(c.message for c in r.failures)
    assert r.stats["up_exits"] == 0 and r.stats["final_exits"] == {"pgday-h1": 0, "pgday-h2": 0}
    assert [a.status for a in r.activities if a.type == "action"] == ["succeeded"]
    assert r.steady_after == {"done": 4, "total": 4}


@pytest.mark.campaign
@pytest.mark.timeout(900)
@pytest.mark.parametrize("disabled", [False, True], ids=["healer", "disabled"])
def test_pg_restarts_real(tmp_path, disabled):
    sc = _scenario()
    r = engine.run(sc, tmp_path, disabled=disabled)
    if not disabled:
        assert r.ok, r.error or "\n".join(c.message for c in r.failures)
        assert len([a for a in r.activities if a.type == "action" and a.status == "succeeded"]) == 2
        return
    assert r.status == "failed", r.error
    broken = {c.name for c in r.failures}
    assert sc.broke_as_declared(broken), "\n".join(c.message for c in r.failures)
    assert r.stats["up_exits"] >= 1
