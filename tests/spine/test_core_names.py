"""One concept, one name: every pure core's entry point is `decide`, in a module named for what it decides
(README, architecture). A new core, or a rename back to `plan`/`should_launch`/`after_iteration`, fails here."""

from __future__ import annotations

import importlib
import inspect

CORES = {
    "healer.core.plan": "the supervisor's remedies and alerts (SPEC's decide(snapshot, policy, memory))",
    "healer.core.dispatch": "which tickets the dispatcher launches, stops or waits on",
    "healer.core.dispatch_pass": "every step of one dispatcher pass (reaps, main, merges, stops, launches)",
    "healer.core.trigger": "whether the repair agent is launched",
    "healer.loop.decide": "whether the governed loop goes on, and why it ends",
}


def test_every_pure_core_is_called_decide():
    for mod in CORES:
        m = importlib.import_module(mod)
        assert inspect.isfunction(getattr(m, "decide", None)), f"{mod} has no decide()"
        for old in ("plan", "should_launch", "after_iteration"):
            assert not inspect.isfunction(getattr(m, old, None)) or getattr(m, old).__module__ != mod, f"{mod}.{old}"
