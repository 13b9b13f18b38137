"""Which alerts become notifications (pure): one per key per cooldown window, never while one is owed.

The shell hands in what the store knows (when each key was last notified, which keys still
have an undelivered notification in the outbox) and writes back what this returns. A flood of
alerts costs a dict lookup each, so a storm of findings never turns into a storm of messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Admission:
    send: list[Any] = field(default_factory=list)  # the alerts to notify, first of each key, in arrival order
    suppressed: dict[str, int] = field(default_factory=dict)  # key -> alerts held back (cooldown or owed)
    owed: set[str] = field(default_factory=set)  # keys held back because a notification is still undelivered
    last: dict[str, float] = field(default_factory=dict)  # key -> window start for the admitted keys


def admit(alerts: Iterable[Any], last: Mapping[str, float], pending: set[str] | frozenset[str], window: float,
          now: float) -> Admission:
    """`alerts` carry `.key` (and optionally `.cooldown`, a per-alert window overriding `window`)."""
    out = Admission()
    send, suppressed, fresh = out.send, out.suppressed, out.last
    for a in alerts:
        k = a.key
        if k in fresh or k in pending:
            suppressed[k] = suppressed.get(k, 0) + 1
            if k in pending:
                out.owed.add(k)
            continue
        w = getattr(a, "cooldown", None)
        w = window if w is None else w
        t = last.get(k)
        if t is not None and now - t < w:
            suppressed[k] = suppressed.get(k, 0) + 1
            continue
        fresh[k] = now
        send.append(a)
    return out


# keys the supervisor may judge clear although another actor raised them before its own threshold:
# the dispatcher pages `main_red:main` at once (clear when main is green), and `supervisor_silent` (clear
# when the supervisor ticks: it is the one judging)
MAIN_RED = "main_red"
SILENT = "supervisor_silent"


def cleared(open_keys: Iterable[str], firing: set[str] | frozenset[str], unknown: set[str] | frozenset[str],
            judged: Iterable[str], *, main_green: bool) -> list[str]:
    """The open (notified, unresolved) alert keys whose condition this tick saw clear, sorted.

    `firing`/`unknown`: the finding keys of the tick (unknown: a fail-open sentinel, never judged clear);
    `judged`: the finding kinds the supervisor judges in full every tick (a key of another kind, an
    escalation or a needs-human notice, is a one-off and never resolved here). A main_red key clears only
    on a green main (the dispatcher pages before the sentinel's threshold); a `supervisor_silent` key
    clears because the supervisor is ticking."""
    kinds = frozenset(judged)
    out = []
    for k in open_keys:
        if k in firing or k in unknown:
            continue
        kind = k.partition(":")[0]
        if k == SILENT or (kind == MAIN_RED and main_green) or (kind != MAIN_RED and kind in kinds):
            out.append(k)
    return sorted(out)
