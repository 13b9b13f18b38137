"""A shared repository that cannot be reached: the dispatcher works from the shared main it fetched last and says
so with a `dispatch.fetch_failed` event (a silent stale main would hide a partition from the operator)."""

from __future__ import annotations

from healer.clock import VirtualClock
from healer.fleet.dispatcher import Dispatcher
from healer.fleet.process_runtime import ProcessRuntime
from healer.store import open_store
from tests.conftest import git, make_repo
from tests.fleet.conftest import scripted_policy


def test_an_unreachable_shared_repository_is_reported_and_main_is_judged_on_the_last_fetch(tmp_path):
    seed = make_repo(tmp_path / "seed")
    bare = tmp_path / "shared.git"
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(bare))
    root = tmp_path / "fleet"
    git(tmp_path, "clone", "-q", str(bare), str(root))
    (root / ".healer").mkdir()
    pol = scripted_policy().model_copy(deep=True)
    pol.fleet.shared_remote = "origin"
    clock = VirtualClock()
    store = open_store(root, clock)
    try:
        d = Dispatcher(root, pol, store, clock, ProcessRuntime())
        assert d.merger.check_main() == "green"
        assert store.events(kinds=["dispatch.fetch_failed"]) == []
        bare.rename(tmp_path / "gone.git")  # the shared repository goes away (a partition, a moved remote)
        assert d.merger.check_main() == "green"  # judged on origin/main as last fetched
        (ev,) = store.events(kinds=["dispatch.fetch_failed"])
        assert ev.payload["remote"] == "origin" and ev.payload["error"]
    finally:
        store.close()
