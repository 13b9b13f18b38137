"""Pure parts of the container features, checked without an engine (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chaos.faults.containers import Target, pick
from healer.containers.run import signal_exit
from healer.fleet.container_runtime import status_of
from healer.fleet.runtime import EXITED, GONE, PAUSED, RUNNING, UNKNOWN


@pytest.fixture
def _needs_engine():  # overrides the conftest's: nothing here talks to Docker
    return None


names = st.lists(st.text("abcdefgh-", min_size=1, max_size=6), unique=True, max_size=12)


@given(names, st.one_of(st.none(), st.integers(0, 15)), st.integers(0, 2**32))
def test_pick_respects_the_blast_radius(ns, count, seed):
    targets = [Target(f"id-{n}", n, "running", {}) for n in ns]
    got = pick(targets, count, seed)
    assert len(got) == (len(targets) if count is None else min(count, len(targets)))
    assert {t.id for t in got} <= {t.id for t in targets}
    assert len({t.id for t in got}) == len(got)  # never the same container twice
    assert got == pick(list(reversed(targets)), count, seed)  # same seed, same targets, whatever the listing order


@given(st.integers(0, 255))
def test_exit_codes_map_like_processes(code):
    st_ = status_of({"State": {"Status": "exited", "ExitCode": code}})
    assert st_.state == EXITED
    assert st_.exit_code == (-(code - 128) if 128 < code <= 192 else code)
    assert signal_exit(137) == -9 and signal_exit(143) == -15 and signal_exit(0) == 0 and signal_exit(None) is None


def test_states_map_like_processes():
    s = {k: status_of({"State": {"Status": k}}).state for k in
         ("running", "restarting", "created", "paused", "exited", "dead", "removing", "weird")}
    assert s == {"running": RUNNING, "restarting": RUNNING, "created": RUNNING, "paused": PAUSED, "exited": EXITED,
                 "dead": GONE, "removing": GONE, "weird": UNKNOWN}
