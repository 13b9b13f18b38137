"""The dispatcher's decisions, pure: main's colour, the dispatch pause, what an agent's exit
means for its ticket, which orphaned ticket is the dispatcher's to requeue, who watches the
supervisor, and the budget window. The shell (healer/fleet/dispatcher.py) gathers the
inputs, calls these, and applies the `Effect`s they return, in order.

Theory of operation. Main is `green`, `red` or `unknown`. A gate that cannot decide says
`unknown`, which neither starts a red period nor ends one (fail-open both ways). Going red
pauses dispatch (reason `main_red`) unless it is already paused; going green lifts only a
pause whose reason is `main_red`: a pause a human or the healer set waits for them
(the dispatch pause table in healer/lifecycle.py). No I/O, no clock: `now` is an input.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from healer import conventions as cv
from healer import lifecycle

GREEN, RED, UNKNOWN = "green", "red", "unknown"
from healer.core.dispatch import HOST_TROUBLE, STOPPED  # noqa: E402 - one definition, the planner's


@dataclass(frozen=True)
class Effect:
    """One thing the shell must do: `set` a setting (optionally with an event), append an `event`, `notify`."""

    op: str  # set | event | notify
    key: str  # setting key, event kind or alert key
    value: Any = None  # setting value, event subject or alert text
    payload: dict[str, Any] = field(default_factory=dict)  # event payload or alert evidence
    event: str | None = None  # set: the event recorded with the write
    severity: str = "warning"


# -- main's colour and the dispatch pause ----------------------------------------------

def main_status(prev: str, verdict: str, has_gates: bool) -> str:
    """Main's new colour from the gates' verdict (`pass`/`fail`/`unknown`)."""
    if not has_gates:
        return GREEN  # no main gates: nothing can see red
    status = {"pass": GREEN, "fail": RED}.get(verdict, UNKNOWN)
    if status == UNKNOWN and prev == RED:
        return RED  # a gate that cannot decide does not end a red period (nor start one)
    return status


def main_changed(prev: str, status: str, *, now: float, branch: str, head: str | None, log: str,
                 paused: bool, paused_reason: str | None, red_since: float | None, pause_on_red: bool = True) -> list[Effect]:
    """What a change of main's colour does: settings, events, the pause (unless fleet.pause_on_red_main is off:
    the supervisor's main_red sentinel then pauses), the alert — under the sentinel's own key, so that the
    dispatcher and the supervisor page once per condition, not twice."""
    if status == prev:
        return []
    out = [Effect("set", cv.MAIN_STATUS, status)]
    if status == RED:
        out += [Effect("set", cv.MAIN_RED_SINCE, now),
                Effect("event", "main.red", branch, {"commit": head, "log": log})]
        if not paused and pause_on_red:
            out += pause(cv.PAUSED_BY_MAIN_RED)
        out.append(Effect("notify", cv.sentinel_key("main_red"),
                          f"main branch {branch} is red at {str(head)[:12]}" + (": dispatch paused" if pause_on_red else ""),
                          {"commit": head, "log": log}, severity="critical"))
    elif prev == RED:
        out += [Effect("set", cv.MAIN_RED_SINCE, None),
                Effect("event", "main.green", branch, {"commit": head, "red_for": (now - red_since) if red_since else None})]
        if paused and paused_reason == cv.PAUSED_BY_MAIN_RED:
            out += resume()
    return out


def pause(reason: str) -> list[Effect]:
    lifecycle.DISPATCH.check("dispatch", lifecycle.DISPATCHING, lifecycle.PAUSED)
    return [Effect("set", cv.DISPATCH_PAUSED_REASON, reason), Effect("set", cv.DISPATCH_PAUSED, True, event="dispatch.paused")]


def resume(event: str = "dispatch.resumed_dispatch") -> list[Effect]:
    lifecycle.DISPATCH.check("dispatch", lifecycle.PAUSED, lifecycle.DISPATCHING)
    return [Effect("set", cv.DISPATCH_PAUSED_REASON, None), Effect("set", cv.DISPATCH_PAUSED, False, event=event)]


def why_not_resume(paused: bool, reason: str | None, main: str, mine: str, force: bool = False) -> str | None:
    """Why `mine` (a pauser) may not lift the dispatch pause now, or None."""
    if not paused:
        return "dispatch is not paused"
    if force:
        return None
    if main == RED:
        return "main is red; dispatch stays paused"
    if reason and reason != mine:
        return f"dispatch was paused by someone else ({reason}); only they lift it (or params.force)"
    return None


# -- an agent's exit ----------------------------------------------------------------

# Linux signal numbers (the signal module is the machine's; the core names them itself)
_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL",
            10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ"}


def signature(code: int | None) -> str | None:
    """The failure signature of an exit with no better one (the loop's result file gives the real one)."""
    if code is None:
        return "lost: process gone, no exit recorded"
    if code < 0:
        name = _SIGNALS.get(-code)
        return f"killed: {name}" if name else f"killed: signal {-code}"
    if code == HOST_TROUBLE:
        return "host_trouble: exit 74 (its disk took no more writes: full, over quota or read-only)"
    return None if code == 0 else f"exit {code}"


def agent_end_state(code: int | None) -> str:
    """exited (a code, the process's own) or lost (vanished, or killed by a signal)."""
    return lifecycle.AGENT_EXITED if code is not None and code >= 0 else lifecycle.AGENT_LOST


@dataclass(frozen=True)
class ExitMove:
    to: str  # review (a proposal opens) | queued
    reason: str
    propose: bool


def exit_move(agent_id: str, code: int | None, head: str | None, sig: str | None) -> ExitMove:
    """Where an in-progress ticket goes when its agent ends: exit 0 with a new commit (`head`: one main does not hold
    yet) opens a proposal; anything else requeues, a clean exit with nothing new too."""
    if code == 0 and head:
        return ExitMove(lifecycle.REVIEW, f"agent {agent_id} exited 0", True)
    if code == 0:
        return ExitMove(lifecycle.QUEUED, f"agent {agent_id} exited 0 with no new commit", False)
    why = ("agent died" if code is None or code < 0 else "agent stopped" if code == STOPPED
           else "agent cut short by its host's disk" if code == HOST_TROUBLE else f"agent exited {code}")
    return ExitMove(lifecycle.QUEUED, f"{why} ({sig})", False)


# -- orphaned tickets ---------------------------------------------------------------

def owns_orphan(live: bool, open_attempts: int, last_move_actor: str | None) -> bool:
    """Is an in-progress ticket with no live agent the dispatcher's to requeue?

    Yes when it has an attempt the dispatcher opened and nobody closed (a crash mid-launch),
    or when the dispatcher itself last moved it; a ticket a human or another tool put in
    progress is left to the supervisor's rules (frozen_in_progress)."""
    if live:
        return False
    return open_attempts > 0 or last_move_actor == cv.DISPATCH_ACTOR


# -- who watches the watcher ------------------------------------------------------------

def supervisor_silent(last_tick: float | None, now: float, threshold: float) -> float | None:
    """Seconds the supervisor has been silent, when past `threshold`; None when it is ticking or never ran."""
    if last_tick is None or threshold <= 0:
        return None
    silent = now - float(last_tick)
    return silent if silent >= threshold else None


# -- budgets ------------------------------------------------------------------------

RESET_FROM = frozenset({lifecycle.NEEDS_HUMAN, lifecycle.BLOCKED, lifecycle.DONE, lifecycle.CLOSED})


def is_reset(frm: str | None, to: str | None) -> bool:
    """A move back to the queue from a stopped or finished state gives the ticket a fresh budget."""
    return to == lifecycle.QUEUED and frm in RESET_FROM


def budget_cuts(moves: Iterable[Any]) -> dict[str, float]:
    """ticket -> when its budget was last reset, from `ticket.moved` events."""
    out: dict[str, float] = {}
    for e in moves:
        if is_reset(e.payload.get("from"), e.payload.get("to")):
            out[e.subject] = max(out.get(e.subject, e.at), e.at)
    return out


def in_window(items: Sequence[Any], cut: float | None, at: str = "at") -> list[Any]:
    """The attempts (or proposals, at="created_at") since the budget reset at `cut`.

    At the same instant counts as after: a ticket in a reset-from state cannot have started
    an attempt, so anything started at the reset's second started after it (a virtual clock
    runs many steps in one second)."""
    if cut is None:
        return list(items)
    return [x for x in items if getattr(x, at) >= cut]
