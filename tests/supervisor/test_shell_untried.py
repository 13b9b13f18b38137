"""An action the executor refused on fresh state is not an attempt: it must not hold the ticket's quiet period."""

from healer.core.model import Memory, PlannedAction
from healer.remedy.actions import Outcome
from healer.supervisor import TickReport, _without_untried

NOW = 1_000.0


def _memory() -> Memory:
    return Memory(attempts={"T-1": [10.0, NOW], "T-2": [NOW], "T-3": [NOW], "T-4": [NOW]})


def test_refused_and_overflow_attempts_are_forgotten_tried_ones_kept():
    rep = TickReport(at=NOW)
    rep.outcomes = [
        (PlannedAction("resume_agent", "T-1"), Outcome("refused", "dispatcher still reaping")),
        (PlannedAction("requeue_ticket", "T-2"), Outcome("done", "ok")),
        (PlannedAction("requeue_ticket", "T-3"), Outcome("aborted", "ticket moved meanwhile")),
        (PlannedAction("stop_agent", "T-4"), Outcome("refused", "rate limit")),
        (PlannedAction("requeue_ticket", "T-4"), Outcome("failed", "git broke")),  # tried: the effect ran
    ]
    mem = _without_untried(_memory(), rep, NOW)
    assert mem.attempts == {"T-1": [10.0], "T-2": [NOW], "T-4": [NOW]}


def test_actions_beyond_the_tick_cap_were_never_tried():
    rep = TickReport(at=NOW)
    rep.overflow = [PlannedAction("drop_label", "T-2", {"label": "to-review"})]
    assert "T-2" not in _without_untried(_memory(), rep, NOW).attempts
