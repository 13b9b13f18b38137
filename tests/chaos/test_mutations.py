"""Mutation test: switch a feature off IN THE PRODUCT (monkeypatch the real code path, no scenario change)
and its game day goes red, naming the expectation that proves the feature. A green game day then means
"this incident cannot happen again", not "the scenario could not tell"."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chaos import engine
from chaos.scenario import discover, load
from healer import conventions, lifecycle
from healer.core import dispatch, endings, limits, notices, plan, rules, waitfor
from healer.core import fleet as fleet_rules
from healer.fleet import dispatch_stop
from healer.fleet.dispatch_board import TicketMover
from healer.fleet.dispatch_merge import Merger
from healer.remedy import limiter as remedy_limits


def _no_wait_labels(mp):
    real = dispatch.RetryRules.of
    mp.setattr(dispatch.RetryRules, "of", classmethod(lambda cls, p: real.__func__(cls, p).__class__(
        **{**real.__func__(cls, p).__dict__, "wait_labels": frozenset()})))


def _no_budget(mp):
    real = dispatch.RetryRules.of
    mp.setattr(dispatch.RetryRules, "of", classmethod(lambda cls, p: real.__func__(cls, p).__class__(
        **{**real.__func__(cls, p).__dict__, "max_launches": 10**6})))


def _no_cas_on_review_to_queued(mp):
    real = TicketMover.move

    def move(self, tid, to, reason, expect=None):  # the compare-and-set dropped on this one move only
        if to == lifecycle.QUEUED and expect == lifecycle.REVIEW:
            expect = None
        return real(self, tid, to, reason, expect)

    mp.setattr(TicketMover, "move", move)


def _dispatcher_ignores_red_main(mp):
    real_of, real_changed = dispatch.RetryRules.of, fleet_rules.main_changed
    mp.setattr(dispatch.RetryRules, "of", classmethod(lambda cls, p: replace(real_of.__func__(cls, p), pause_on_red_main=False)))
    mp.setattr(fleet_rules, "main_changed", lambda *a, **k: real_changed(*a, **{**k, "pause_on_red": False}))


def _never_realerts(mp):
    real = notices.admit
    # a key seen once stays inside its window for ever: the cooldown that never re-alerts
    mp.setattr(notices, "admit", lambda alerts, last, pending, window, now: real(
        [a if getattr(a, "cooldown", None) is None else _no_own_window(a) for a in alerts], last, pending, float("inf"), now))


def _no_own_window(a):
    a.cooldown = None
    return a


def _cycle_at_the_oldest(mp):
    real = waitfor._created
    mp.setattr(waitfor, "_created", lambda ix, node: (-real(ix, node)[0], real(ix, node)[1]))


def _evidence_without_signature(mp):
    real = dispatch_stop.budget_window

    def window(store, tid):
        atts, props = real(store, tid)
        return [replace(a, failure_signature=None, state_hash=None) for a in atts], props

    mp.setattr(dispatch_stop, "budget_window", window)


MUTANTS = {
    # feature switched off                 (scenario, how, an expectation that must break)
    "dispatcher ignores wait labels": ("stuck-review-label", _no_wait_labels, "held while labelled then launched"),
    "no launch budget": ("relaunch-storm-budget", _no_budget, "exactly 5 launches"),
    "no backoff": ("relaunch-storm-budget", lambda mp: mp.setattr(dispatch, "backoff_until", lambda *a, **k: None),
                   "launches back off 5/10/20/40 min"),
    # components: the one cycle search both the full and the incremental decision use
    "no wait-for graph": ("frozen-blocked-by-cycle", lambda mp: mp.setattr(waitfor, "components", lambda *a, **k: []),
                          "each cycle escalated at its youngest ticket"),
    # the planner reads the action registry's live view (healer/actions); the mutant sees a copy without the pause
    "supervisor cannot pause on red main": ("red-main", lambda mp: mp.setattr(plan, "APPLICABLE", {
                                                **dict(rules.APPLICABLE.items()), "main_red": frozenset({"notify"})}),
                                            "dispatch paused by the supervisor"),
    "no max_actions_per_tick cap": ("frozen-in-progress", lambda mp: mp.setattr(limits.BlastRadius, "why_not",
                                                                                lambda self, *a: None),
                                    "blast radius, at most 20 actions per supervisor tick"),
    "no expect on review->queued": ("human-moves-mid-review", _no_cas_on_review_to_queued, "the human's escalation stands"),
    "no compare-and-set before a merge": ("human-escalates-mid-merge",
                                          lambda mp: mp.setattr(Merger, "unwanted", lambda self, t, p: None),
                                          "never merged"),
    "a full disk counted as the ticket's failure": ("launch-fails",
                                                    # the infrastructure's endings (healer/core/endings.py) counted
                                                    lambda mp: mp.setattr(endings, "is_infra", lambda sig: False),
                                                    "a full disk costs no budget"),
    "two keys for one red main": ("notification-storm", lambda mp: mp.setattr(conventions, "sentinel_key", lambda kind: kind),
                                  "one page per condition (no second key for the same red main)"),
    # issue 34's audit: green game days with these
    "dispatcher ignores a red main": ("red-main-paused", _dispatcher_ignores_red_main, "paused in the pass that saw red"),
    "a cooldown that never re-alerts": ("saturated-pool", _never_realerts, "paged again after the window"),
    "the quiet period ignores human moves": ("human-moves-quiet-period",
                                             lambda mp: mp.setattr(remedy_limits, "_human_attempt", lambda ev: False),
                                             "nothing done to R-1 for 4 h after the human"),
    "a wait-for cycle broken at the oldest ticket": ("frozen-blocked-by-cycle", _cycle_at_the_oldest,
                                                     "broken at the youngest by age"),
    "evidence without signature and state hash": ("relaunch-storm-budget", _evidence_without_signature,
                                                  "the page carries the evidence"),
}


@pytest.mark.long  # 51 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_a_feature_switched_off_in_the_product_turns_its_game_day_red(mutant, monkeypatch, tmp_path):
    name, mutate, expectation = MUTANTS[mutant]
    sc = load(discover([name])[0])
    mutate(monkeypatch)
    r = engine.run(sc, tmp_path)
    assert r.status == "failed", f"{mutant}: {name} still {r.status}"
    assert expectation in {c.name for c in r.failures}, [c.message for c in r.failures]
