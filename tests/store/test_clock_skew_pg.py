"""Hosts whose clocks disagree, on PostgreSQL (issue 40 item 2): a host whose wall clock is 2 h ahead judges ages on
the server's clock (`clock_timestamp()`), reports the skew once (clock.skew), and does not take another host's
lease on its own clock's word."""

from __future__ import annotations

from healer.clock import OffsetClock, system
from healer.core import trusted_time as tt
from healer.fleet.timewatch import LeaseJudge, TimeWatch
from healer.store import open_url


def test_a_host_ahead_judges_on_the_servers_clock_and_steals_no_lease(pg_url, tmp_path):
    offset = tmp_path / "offset"
    offset.write_text("7200\n")
    ahead = OffsetClock(str(offset))  # this host's wall clock, 2 h ahead; its monotonic clock the machine's
    other = open_url(pg_url)  # another host, on time: holds the supervisor lease
    mine = open_url(pg_url, ahead)
    try:
        assert other.acquire_lease("supervisor", "other", 1, "host-b", 90) is not None
        watch = TimeWatch(ahead)
        tb, state = watch.read(mine, 30.0, "supervisor", "host-a")
        assert abs(tb.now - system().now()) < 30  # the server's clock, not this host's
        assert state.skew is not None and abs(state.skew.size - 7200) < 30
        watch.read(mine, 30.0, "supervisor", "host-a")
        [ev] = mine.events(kinds=["clock.skew"])  # once, not per pass
        assert ev.subject == "host-a" and abs(ev.payload["size"] - 7200) < 30
        # its store clock says the other's lease expired 2 h ago; a skewed host does not believe it
        judge = LeaseJudge(watch, 90.0, 30.0)
        assert mine.acquire_lease("supervisor", "mine", 2, "host-a", 90, expired=judge) is None
        assert tt.in_doubt(watch.state, ahead.monotonic(), 90.0)
        assert mine.acquire_lease("supervisor", "mine", 2, "host-a", 90) is not None  # what the plain expiry did
    finally:
        mine.close()
        other.close()
