"""bench/mutation_score.py: the regression check against the committed baseline, and the baseline itself."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("mutation_score", ROOT / "bench" / "mutation_score.py")
ms = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ms)


def test_a_mutation_the_baseline_caught_and_no_scenario_catches_now_is_a_regression():
    before = {"behaviour: a": "red-main", "behaviour: b": None, "number: c x2": "stuck-agent"}
    now = {"behaviour": {"behaviour: a": None, "behaviour: b": None}, "number": {"number: c x2": "no-closes"}}
    assert ms.regressions(before, now) == (["behaviour: a"], [])
    # caught by another scenario than before: no regression; never caught before: none either
    assert ms.regressions(before, {"behaviour": {"behaviour: a": "red-main-paused"}, "number": {"number: c x2": "x"}}) \
        == ([], [])


def test_a_caught_mutation_taken_off_the_list_is_a_regression_unless_the_run_was_narrowed():
    before = {"behaviour: a": "red-main", "number: c x2": "stuck-agent"}
    now = {"behaviour": {"behaviour: a": "red-main"}, "number": {}}
    assert ms.regressions(before, now) == ([], ["number: c x2"])
    assert ms.regressions(before, now, whole_list=False) == ([], [])  # --only
    assert ms.regressions(before, {"behaviour": {"behaviour: a": None}, "number": {}}, whole_suite=False) == ([], [])


def test_the_committed_baseline_names_every_mutation_and_meets_the_issue_34_targets():
    base = json.loads((ROOT / "bench" / "mutation_baseline.json").read_text())
    assert set(base["behaviour"]) == set(ms.behaviour_mutations())
    assert set(base["number"]) == set(ms.number_mutations())
    caught = [k for k, v in base["behaviour"].items() if v]
    assert len(base["behaviour"]) >= 12 and len(caught) >= len(base["behaviour"]) - 2, base["behaviour"]
    # every seed number is caught by some scenario (a standby taking a halved lease sooner: supervisor-standby-takeover's
    # "no sooner than 60 s")
    missed = {k for k, v in base["number"].items() if not v}
    assert not missed, missed


def test_a_number_mutation_changes_the_products_default_in_that_process_only():
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()

    def child():
        ms.set_default(("health", "agent_stuck"), "3h")
        ms.set_default(("health", "stale_labels"), {"to-review": "4h"})
        from healer.policy.schema import Policy

        p = Policy()
        q.put((p.health.agent_stuck, p.health.stale_labels["to-review"]))

    p = ctx.Process(target=child)
    p.start()
    p.join(60)
    assert q.get(timeout=10) == (3 * 3600.0, 4 * 3600.0)
    from healer.policy.schema import Policy

    assert Policy().health.agent_stuck == 90 * 60.0  # this process kept the seed
