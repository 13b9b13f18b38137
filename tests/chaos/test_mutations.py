"""Mutation test: switch a feature off IN THE PRODUCT (monkeypatch the real code path, no scenario change)
and its game day goes red, naming the expectation that proves the feature. A green game day then means
"this incident cannot happen again", not "the scenario could not tell"."""

from __future__ import annotations

import pytest

from chaos import engine
from chaos.scenario import discover, load
from healer import conventions, lifecycle
from healer.core import dispatch, endings, limits, rules, waitfor
from healer.fleet.dispatcher import Dispatcher


def _no_wait_labels(mp):
    real = dispatch.RetryRules.of
    mp.setattr(dispatch.RetryRules, "of", classmethod(lambda cls, p: real.__func__(cls, p).__class__(
        **{**real.__func__(cls, p).__dict__, "wait_labels": frozenset()})))


def _no_budget(mp):
    real = dispatch.RetryRules.of
    mp.setattr(dispatch.RetryRules, "of", classmethod(lambda cls, p: real.__func__(cls, p).__class__(
        **{**real.__func__(cls, p).__dict__, "max_launches": 10**6})))


def _no_cas_on_review_to_queued(mp):
    real = Dispatcher._move

    def _move(self, tid, to, reason, expect=None):  # the compare-and-set dropped on this one move only
        if to == lifecycle.QUEUED and expect == lifecycle.REVIEW:
            expect = None
        return real(self, tid, to, reason, expect)

    mp.setattr(Dispatcher, "_move", _move)


MUTANTS = {
    # feature switched off                 (scenario, how, an expectation that must break)
    "dispatcher ignores wait labels": ("stuck-review-label", _no_wait_labels, "held while labelled then launched"),
    "no launch budget": ("relaunch-storm-budget", _no_budget, "exactly 5 launches"),
    "no backoff": ("relaunch-storm-budget", lambda mp: mp.setattr(dispatch, "backoff_until", lambda a, b: None),
                   "launches back off 5/10/20/40 min"),
    # components: the one cycle search both the full and the incremental decision use
    "no wait-for graph": ("frozen-blocked-by-cycle", lambda mp: mp.setattr(waitfor, "components", lambda *a, **k: []),
                          "each cycle escalated at its youngest ticket"),
    "supervisor cannot pause on red main": ("red-main", lambda mp: mp.setitem(rules.APPLICABLE, "main_red",
                                                                              frozenset({"notify"})),
                                            "dispatch paused by the supervisor"),
    "no max_actions_per_tick cap": ("frozen-in-progress", lambda mp: mp.setattr(limits.BlastRadius, "why_not",
                                                                                lambda self, *a: None),
                                    "blast radius, at most 20 actions per supervisor tick"),
    "no expect on review->queued": ("human-moves-mid-review", _no_cas_on_review_to_queued, "the human's escalation stands"),
    "no compare-and-set before a merge": ("human-escalates-mid-merge",
                                          lambda mp: mp.setattr(Dispatcher, "_unwanted", lambda self, t, p: None),
                                          "never merged"),
    "a full disk counted as the ticket's failure": ("launch-fails",
                                                    # the infrastructure's endings (healer/core/endings.py) counted
                                                    lambda mp: mp.setattr(endings, "is_infra", lambda sig: False),
                                                    "a full disk costs no budget"),
    "two keys for one red main": ("notification-storm", lambda mp: mp.setattr(conventions, "sentinel_key", lambda kind: kind),
                                  "one page per condition (no second key for the same red main)"),
}


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_a_feature_switched_off_in_the_product_turns_its_game_day_red(mutant, monkeypatch, tmp_path):
    name, mutate, expectation = MUTANTS[mutant]
    sc = load(discover([name])[0])
    mutate(monkeypatch)
    r = engine.run(sc, tmp_path)
    assert r.status == "failed", f"{mutant}: {name} still {r.status}"
    assert expectation in {c.name for c in r.failures}, [c.message for c in r.failures]
