"""Small shell helpers: placeholder substitution, git state hashing, process runtime states."""

from __future__ import annotations

import signal
import sys

from healer import git
from healer.fleet.dispatch_launch import _subst
from healer.fleet.process_runtime import ProcessRuntime
from healer.fleet.runtime import Handle, LaunchSpec
from healer.loop import gitops
from tests.conftest import make_repo, wait_until


def test_subst_replaces_known_placeholders_only():
    assert _subst("{python} -c 'print({1: 2})' {run_id} {nope}", {"python": "py", "run_id": "T-1-01"}) == \
        "py -c 'print({1: 2})' T-1-01 {nope}"
    assert _subst("# {ticket}: {title}\n\n{body}", {"ticket": "T-1", "title": "x", "body": "{title} {"}) == "# T-1: x\n\n{title} {"


def test_state_hash_sees_uncommitted_changes_but_not_ignored_files(tmp_path):
    r = make_repo(tmp_path / "r")
    h0, s0 = gitops.state(r)
    (r / ".healer").mkdir(exist_ok=True)
    (r / ".healer" / "junk").write_text("x")
    assert gitops.state(r) == (h0, s0)
    (r / "progress.md").write_text("iteration 1: the loop's own memory is not progress\n")
    assert gitops.state(r) == (h0, s0)
    (r / "new.txt").write_text("y")
    h1, s1 = gitops.state(r)
    assert h1 == h0 and s1 != s0
    assert git.run(r, "status", "--porcelain").stdout == "?? new.txt\n?? progress.md"  # the real index was not touched
    assert gitops.state(tmp_path / "gone") == (None, None)


def test_process_runtime_running_paused_exited_gone(tmp_path):
    rt = ProcessRuntime()
    h = rt.launch(LaunchSpec(argv=[sys.executable, "-c", "import threading; threading.Event().wait(30)"], cwd=str(tmp_path),
                             log_path=str(tmp_path / "log")))
    assert rt.status(h).state == "running"
    import os

    os.kill(h.pid, signal.SIGSTOP)
    wait_until(lambda: rt.status(h).state == "paused", 60, "paused")
    os.kill(h.pid, signal.SIGCONT)
    adopted = ProcessRuntime()  # a restarted dispatcher knows only the pid and the marker
    assert adopted.status(h).state == "running"
    assert adopted.status(Handle(kind="process", pid=h.pid, marker="someone-else")).state == "gone"
    rt.stop(h, 1.0)
    assert rt.status(h).state == "exited" and rt.status(h).exit_code == -signal.SIGTERM
    assert adopted.status(h).state == "gone"
    h2 = rt.launch(LaunchSpec(argv=[sys.executable, "-c", "raise SystemExit(7)"], cwd=str(tmp_path)))
    assert rt.wait(h2, 10).exit_code == 7


def test_budget_resets_read_incrementally_equal_a_full_read(tmp_path):
    """The dispatcher keeps its budget cuts between passes, reading only the moves logged since: after any
    sequence of moves (resets from needs-human, blocked, done; other moves; time going back), the same
    cuts as a full read of the log."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from healer import lifecycle as lc
    from healer.clock import VirtualClock
    from healer.fleet import budget
    from healer.store.sqlite import SqliteStore

    moves = [(lc.QUEUED, lc.IN_PROGRESS), (lc.IN_PROGRESS, lc.NEEDS_HUMAN), (lc.NEEDS_HUMAN, lc.QUEUED),
             (lc.IN_PROGRESS, lc.QUEUED), (lc.IN_PROGRESS, lc.BLOCKED), (lc.BLOCKED, lc.QUEUED)]
    step = st.tuples(st.sampled_from(["T-1", "T-2", "T-3"]), st.integers(-100, 500), st.integers(0, 2), st.booleans())

    @settings(max_examples=30, deadline=None)
    @given(steps=st.lists(step, max_size=30))
    def check(steps):
        clock = VirtualClock(1000.0)
        store = SqliteStore(tmp_path / f"h{len(list(tmp_path.iterdir()))}.db", clock)
        try:
            for tid in ("T-1", "T-2", "T-3"):
                store.add_ticket(tid, id=tid)
            resets = budget.Resets()
            for tid, dt, pick, look in steps:
                clock.set(clock.now() + dt)  # a clock jump back too
                state = store.ticket(tid).state
                tos = [b for a, b in moves if a == state]
                if tos:
                    store.move_ticket(tid, tos[pick % len(tos)], actor="t")
                if look:
                    assert resets.cuts(store) == budget.cuts(store)
            assert resets.cuts(store) == budget.cuts(store)
        finally:
            store.close()

    check()
