"""The multi-host game day (chaos/multihost.py): real `healer up` hosts, one PostgreSQL board, one shared bare
repository; SIGKILL of the leading host, a host cut from the database, PostgreSQL SIGSTOPped. Both variants are
campaigns (`make campaigns`): `make test` runs tests/store/test_multihost_up.py (two real `healer up`, one killed)."""

from __future__ import annotations

import json

import pytest

from chaos import multihost


def _run(own_pg_url, pg_cluster, tmp_path, **kw):
    rep = multihost.run(own_pg_url, pg_cluster, workdir=tmp_path / "gameday", **kw)
    print(json.dumps({"violations": rep.violations, **rep.facts}, indent=1))
    assert rep.facts.get("finished"), rep.facts
    assert rep.violations == []
    return rep


@pytest.mark.campaign
def test_three_hosts_survive_a_killed_leader_a_short_partition_and_a_paused_database(own_pg_url, pg_cluster, tmp_path):
    rep = _run(own_pg_url, pg_cluster, tmp_path, tickets=9, ttl=3.0, work=1.0, partition=8.0, pause_db=3.0, timeout=240)
    kill = next(f for f in rep.facts["faults"] if f["fault"] == "kill_leader")
    assert kill["takeover_s"] is not None and kill["takeover_s"] <= 3.0 + 0.5


@pytest.mark.campaign
@pytest.mark.parametrize("hosts", [3, 2])
def test_multihost_gameday_full(own_pg_url, pg_cluster, tmp_path, hosts):
    """The issue's campaign: the leader SIGKILLed, the leading host cut for 30 s, PostgreSQL paused 10 s."""
    rep = _run(own_pg_url, pg_cluster, tmp_path, hosts=hosts, tickets=15, ttl=4.0, work=2.0, partition=30.0, pause_db=10.0,
               timeout=600)
    assert {f["fault"] for f in rep.facts["faults"]} == {"kill_leader", "partition", "pause_db"}
