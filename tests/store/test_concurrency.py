"""Several processes on one store, each backend: claims taken once, a follower that misses nothing,
and fenced lease holders whose accepted writes never overlap (checked over the event log, Jepsen-style)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from healer.store import open_url
from tests.conftest import REPO, wait_until

WORKER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from healer.clock import system
    from healer.errors import StaleLease
    from healer.store import open_url
    url, role, who, go, out, n = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]), sys.argv[5], int(sys.argv[6])
    s = open_url(url)
    clock = system()
    Path(out + ".ready").touch()
    while not go.exists():
        clock.sleep(0.005)
    got = []
    if role == "claim":
        while (t := s.claim_ticket(actor=who)) is not None:
            got.append(t.id)
    elif role == "append":
        got = [s.append("load", who, {"i": i}) for i in range(n)]
    elif role == "lease":
        import random
        rnd = random.Random(who)
        end = clock.monotonic() + n
        while clock.monotonic() < end:
            lease = s.acquire_lease("leader", who, 1, who, 0.3)
            s.hold(lease)
            if lease is not None:
                clock.sleep(rnd.choice([0, 0, 0.05, 0.5]))  # sometimes stalls past the ttl: a stale holder then writes
                try:
                    s.append("work", who, {"token": lease.token})
                    got.append(lease.token)
                except StaleLease:
                    pass
            clock.sleep(0.01)
    s.close()
    Path(out).write_text(json.dumps(got))
""")


def run_workers(tmp_path, url: str, role: str, n: int, count: int = 3) -> list[list]:
    go = tmp_path / f"go-{role}"
    procs = []
    for i in range(count):
        out = tmp_path / f"{role}-{i}.json"
        procs.append((out, subprocess.Popen([sys.executable, "-c", WORKER, url, role, f"w{i}", str(go), str(out), str(n)],
                                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    wait_until(lambda: all((tmp_path / f"{role}-{i}.json.ready").exists() for i in range(count)), timeout=120, what="workers ready")
    go.touch()
    results = []
    for out, p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        results.append(json.loads(out.read_text()))
    return results


def test_three_claimers_take_each_ticket_exactly_once(tmp_path, store_url):
    s = open_url(store_url)
    for i in range(90):
        s.add_ticket(f"t{i}", priority=i % 3)
    got = run_workers(tmp_path, store_url, "claim", 0)
    taken = [t for g in got for t in g]
    assert sorted(taken) == sorted(t.id for t in s.tickets()) and len(set(taken)) == 90
    assert s.tickets(states=["queued"]) == []
    assert s.count_events("ticket.moved") == 90
    s.close()


def test_a_follower_sees_every_event_in_id_order_while_three_write(tmp_path, store_url):
    s = open_url(store_url)
    s.append("start")
    seen: list[int] = []
    go = tmp_path / "go-append"
    procs = []
    for i in range(3):
        out = tmp_path / f"append-{i}.json"
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER, store_url, "append", f"w{i}", str(go), str(out), "200"],
                                      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    wait_until(lambda: all((tmp_path / f"append-{i}.json.ready").exists() for i in range(3)), timeout=120, what="writers ready")
    cursor = s.last_event_id()  # before the writers go: an event they commit first is behind no cursor of ours
    go.touch()

    def caught_up() -> bool:
        nonlocal cursor
        for e in s.events(after=cursor, kinds=None):
            seen.append(e.id)
            cursor = e.id
        return len(seen) >= 600

    # done when the follower saw all 600, or every writer has exited (then a short count is the writers' to
    # explain first: a writer that failed says why, not a 240 s wait blamed on the follower)
    wait_until(lambda: caught_up() or all(p.poll() is not None for p in procs), timeout=240,
               what=lambda: f"600 events (saw {len(seen)})", poll=0.001)
    for p in procs:
        assert p.wait(timeout=60) == 0, p.stderr.read()
    caught_up()
    everything = [e.id for e in s.events(kinds=["load"])]
    assert seen == everything, "a follower missed an event committed behind its cursor"
    s.close()


@pytest.mark.long  # 5 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_fenced_holders_never_overlap(tmp_path, store_url):
    run_workers(tmp_path, store_url, "lease", 4, count=3)
    s = open_url(store_url)
    current = None  # the token of the latest grant, in commit (id) order
    grants = accepted = 0
    for e in s.events():
        if e.kind in ("lease.acquired", "lease.taken_over"):
            current, grants = e.payload["token"], grants + 1
        elif e.kind == "work":
            accepted += 1
            assert e.payload["token"] == current, f"event {e.id}: a write with token {e.payload['token']} accepted while {current} held"
    assert grants >= 2 and accepted > 5, (grants, accepted)  # the lease changed hands under load
    assert s.count_events("lease.stale_write_refused") >= 1  # and a stale holder did try
    s.close()
