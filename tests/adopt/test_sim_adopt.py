"""Adopted loops in a simulated world (game days' way: the ports swapped, never the logic): the process table is a
list the test writes (healer/adopt.py: ProcTable), the clock virtual; the worktree and the CLI's transcript are real
files. A hung CLI (its transcript stops growing) and a runaway one (its transcript bills past the cap) drive the real
supervisor tick: the findings fire at their numbers, the snapshot comes first, and a stop is only ever signalled to
the adopted identity (here it is refused: the simulated pid has another start time by then)."""

from __future__ import annotations

import json
import os
import signal

from healer.clock import VirtualClock, system
from healer.core.adopt import Proc
from healer.store import open_store
from healer.supervisor import Supervisor
from tests.adopt.conftest import fleet, policy, worktree


class SimTable:
    """The simulated process table: what the test says runs."""

    def __init__(self) -> None:
        self.procs: dict[int, Proc] = {}
        self.signals: list[tuple[int, int]] = []

    def scan(self) -> list[Proc]:
        return list(self.procs.values())

    def start_ticks(self, pid: int) -> int | None:
        p = self.procs.get(pid)
        return p.start_ticks if p else None

    def boot_time(self) -> float:
        return 0.0

    def kill(self, pid: int, sig: int) -> None:
        self.kill_group(pid, sig)

    def kill_group(self, pgid: int, sig: int) -> None:
        """A simulated signal: recorded; a SIGTERM ends the loop and its pid goes to another process at once."""
        self.signals.append((pgid, sig))
        if sig == signal.SIGTERM and pgid in self.procs:
            old = self.procs[pgid]
            self.procs[pgid] = Proc(old.pid, 1, old.pid, old.start_ticks + 7, ("sshd",), "/", 0)  # pid reused


def _turn(i: int, tokens: int) -> str:
    return json.dumps({"type": "assistant", "sessionId": "s-1", "cwd": CWD[0], "message": {
        "id": f"msg_{i}", "model": "claude-sonnet-4-5",
        "usage": {"input_tokens": tokens, "output_tokens": tokens // 10, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0}}}) + "\n"


CWD = [""]


def _world(tmp_path):
    root = fleet(tmp_path / "fleet")
    wt = worktree(tmp_path / "wt")
    CWD[0] = str(wt)
    home = tmp_path / "home"
    proj = home / ".claude" / "projects" / str(wt).replace("/", "-")
    proj.mkdir(parents=True)
    start = system().now()
    clock = VirtualClock(start)
    table = SimTable()
    # a loop started `start` seconds after boot 0: its start time is `start` (start ticks / CLK_TCK)
    tick = os.sysconf("SC_CLK_TCK")
    table.procs[4242] = Proc(4242, 1, 4242, int(start * tick), ("bash", "loop.sh"), str(wt), 0, {"HOME": str(home)})
    return root, wt, proj / "s-1.jsonl", clock, table


def test_sim_hung_cli_goes_idle_then_stuck_and_is_snapshotted_not_signalled(tmp_path):
    root, wt, transcript, clock, table = _world(tmp_path)
    transcript.write_text(_turn(1, 1000))
    os.utime(transcript, (clock.now(), clock.now()))
    for f in wt.rglob("*"):
        if ".git" not in f.parts:
            os.utime(f, (clock.now() - 5, clock.now() - 5))
    pol = policy(root, cli="claude", idle="5m", stuck="2h", no_progress="3h", allow_stop=False)
    sup = Supervisor(root, pol, open_store(root, clock), clock, proctable=table)
    kinds = lambda r: {f.kind for f in r.decision.findings}  # noqa: E731
    assert kinds(sup.tick()) == set()
    clock.advance(299)
    assert "adopted_idle" not in kinds(sup.tick())  # never a tick early
    clock.advance(1)
    assert "adopted_idle" in kinds(sup.tick())
    clock.advance(2 * 3600)
    rep = sup.tick()
    assert {"adopted_idle", "adopted_stuck"} <= kinds(rep)
    assert sup.store.events(prefix="adopt.snapshot") and not sup.store.events(prefix="adopt.stopped")
    n = len(sup.store.events(prefix="adopt.snapshot"))
    clock.advance(60)
    sup.tick()  # the same work: no second snapshot, no intent
    assert len(sup.store.events(prefix="adopt.snapshot")) == n
    (wt / "new.txt").write_text("more work\n")
    clock.advance(60)
    sup.tick()  # new work while it still fires: snapshotted again, to the next ref
    snaps = sup.store.events(prefix="adopt.snapshot")
    assert len(snaps) == n + 1 and snaps[-1].payload["ref"].endswith("/2")


def test_sim_runaway_cost_is_stopped_only_while_the_identity_holds(tmp_path):
    root, wt, transcript, clock, table = _world(tmp_path)
    pol = policy(root, cli="claude", cost_cap_usd=1.0, idle="1h", stuck="1h", no_progress="1h", allow_stop=True,
                 kill_grace="1s")
    sup = Supervisor(root, pol, open_store(root, clock), clock, proctable=table)
    with transcript.open("a") as f:
        for i in range(2):  # 100k in + 10k out at Sonnet's list price ($3 / $15 per million): $0.45 a turn
            f.write(_turn(i, 100_000))
    kinds = lambda r: {f.kind for f in r.decision.findings}  # noqa: E731
    assert "adopted_cost" not in kinds(sup.tick())  # $0.90
    with transcript.open("a") as f:
        f.write(_turn(2, 100_000))
    clock.advance(30)
    rep = sup.tick()  # $1.35: over the cap
    assert rep.decision is not None
    f = next(f for f in rep.decision.findings if f.kind == "adopted_cost")
    assert f.evidence["cost_usd"] == 1.35 and f.evidence["pid"] == 4242
    stopped = sup.store.events(prefix="adopt.stopped")
    snaps = sup.store.events(prefix="adopt.snapshot")
    assert stopped and snaps and snaps[0].id < stopped[0].id
    # SIGTERM to the adopted group; then its pid went to another process: no SIGKILL to a stranger
    assert table.signals == [(4242, signal.SIGTERM)]
    assert stopped[0].payload["signals"] == ["SIGTERM"]
    rep = sup.tick()
    assert rep.decision is not None
    assert not [f for f in rep.decision.findings if f.kind.startswith("adopted_")]  # the stranger is nobody's
    assert [a.id for a in sup.store.adopted()] == []  # not adopted: `sshd` matches no rule
