"""The sim world's new ports and faults act on the port only, so the REAL adoption scan, judge and dispatcher's disk
guard see them: an adopted loop's leftover processes (children, daemonised ones) and failures, the disk's free
bytes. Each fault refuses what it cannot do, as every fault does; and a product rule broken on purpose turns its
game day red on the expectation that names it."""

from __future__ import annotations

import pytest

from chaos import engine
from chaos.engine.sim import SimEngine
from chaos.faults import NotApplied
from chaos.faults.registry import REAL, SIM
from chaos.faults.worlds import inject, unsupported
from chaos.scenario import discover, load
from chaos.scenario_parts import Fault
from healer.core import adopt as core


def _world(name, tmp_path):
    e = SimEngine(load(discover([name])[0]), tmp_path)
    e.begin()
    return e


def test_a_leaking_loops_processes_are_its_group_and_its_daemonised_descendants(tmp_path):
    e = _world("adopted-leaking-children", tmp_path)
    try:
        e.advance(61.0)  # L-1's first turn: 3 processes left running, the 2nd daemonised (setsid)
        loop = e.adopt.loops["L-1"]
        ps = e.adopt.table.scan()
        kids = [p for p in ps if p.ppid == loop.pid]
        assert len(kids) == 3 and sum(p.pgid != loop.pid for p in kids) == 1
        assert core.group_usage(ps, loop.pid, loop.pid) == (4, (8 << 20) + 3 * (10 << 20))
        e.adopt.signalled(loop.pid, 15, group=True)  # the group's end: the daemonised one lives on, an orphan
        left = [p for p in e.adopt.table.scan() if p.pid in loop.children]
        assert [(p.ppid, p.pgid == p.pid) for p in left] == [(1, True)]
    finally:
        e.abort()


def test_the_new_adopted_faults_refuse_what_they_cannot_do(tmp_path):
    e = _world("adopted-same-failure", tmp_path)
    try:
        with pytest.raises(NotApplied, match="names the failure"):
            inject(SIM, e, Fault(fault="adopted_same_failure", at=0, target="L-1"))
        with pytest.raises(NotApplied, match="no running adopted loop"):
            inject(SIM, e, Fault(fault="adopted_leaking_children", at=0, target="L-9"))
        with pytest.raises(NotApplied, match="no running adopted loop"):
            inject(SIM, e, Fault(fault="adopted_flip_flop", at=0, target="L-9"))
    finally:
        e.abort()
    for name in ("adopted_leaking_children", "adopted_same_failure", "adopted_flip_flop", "adopted_spinning", "disk_full"):
        assert unsupported(name, REAL) and unsupported(name, SIM) is None


def test_disk_full_is_what_the_dispatchers_disk_port_answers_until_disk_freed(tmp_path):
    e = _world("disk-fills-up", tmp_path)
    try:
        assert e.ports.disk_free(e.root)[1] == e.disk.PLENTY
        inject(SIM, e, Fault(fault="disk_full", at=0, params={"free_mib": 100}))
        assert e.ports.disk_free(e.root)[1] == 100 << 20 and e.ports.disk_free(e.root / "absent") is None
        inject(SIM, e, Fault(fault="disk_freed", at=0))
        assert e.ports.disk_free(e.root)[1] == e.disk.PLENTY
    finally:
        e.abort()


def test_a_usage_count_blind_to_daemonised_children_fails_the_leaking_children_day(monkeypatch, tmp_path):
    real = core.group_usage
    monkeypatch.setattr(core, "group_usage",
                        lambda ps, pid, pgid: real([p for p in ps if p.pgid == pgid or p.pid == pid], pid, pgid))
    monkeypatch.setattr("healer.adopt.group_usage", core.group_usage)
    r = engine.run(load(discover(["adopted-leaking-children"])[0]), tmp_path)
    assert "L-1 stopped at its 4th turn" in {c.name for c in r.failures}, [c.message for c in r.failures]
