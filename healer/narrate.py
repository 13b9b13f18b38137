"""What the fleet did, one line per event that a person watching a controller wants to see: a ticket's transition,
a remediation action with its intent and verified outcome, a page sent or resolved, an escalation, main's colour,
the dispatch pause. Pure: an event in, a line or None out. `healer up` prints these lines as it reads the event log
by cursor (healer/cli/watching.py); the console and `healer journal` can reuse them.

Ticks (`supervisor.tick`, `dispatch.tick`, a standby's `supervisor.skipped`) are heartbeats, not news: `TICKS`
names them so that `up` stays quiet between changes and `journal` hides them unless asked (`--ticks`).
"""

from __future__ import annotations

from typing import Any

from healer.clock import iso

TICKS = frozenset({"supervisor.tick", "dispatch.tick", "supervisor.skipped"})

# remedy.<status>: the executor's one record per action (healer/remedy/actions.py `_record`); DONE means verified
_REMEDY = ("remedy.done", "remedy.refused", "remedy.aborted", "remedy.failed")
_PAGES = ("notify.sent", "notify.resolved", "notify.expired", "notify.rejected")
_FLEET = ("main.red", "main.green", "dispatch.paused", "dispatch.resumed_dispatch")
# loops healer did not launch (docs/adopt.md): found, ended, replaced under their pid; what is done to them is remedy.*
_ADOPT = ("adopt.registered", "adopt.gone", "adopt.identity_changed")

# every kind `line` can speak of: a reader asks the store for these only (a tick's large payload is never read)
KINDS = ("ticket.created", "ticket.moved", *_REMEDY, *_PAGES, *_FLEET, *_ADOPT)

_REASON_MAX = 160


def is_tick(kind: str) -> bool:
    return kind in TICKS


def _short(text: Any, limit: int = _REASON_MAX) -> str:
    s = " ".join(str(text or "").split())  # one line: a reason with newlines (a gate log's tail) stays one line
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _why(reason: Any) -> str:
    s = _short(reason)
    return f" ({s})" if s else ""


def _outcome(status: str, reason: str) -> str:
    if status == "done":
        return "done, verified" if reason in ("", "ok") else f"done ({_short(reason)})"
    return f"{status}: {_short(reason)}" if reason else status


def _transition(e) -> str:
    p = e.payload
    return (f"ticket {e.subject}: {p.get('from', '?')} -> {p.get('to', '?')}{_why(p.get('reason') or p.get('event'))}"
            f" by {p.get('actor') or '?'}")


def _action(e) -> str:
    p = e.payload
    status = e.kind.split(".", 1)[1]
    action = p.get("action") or "?"
    intent = f"intent {p['intent']}" if p.get("intent") is not None else "no intent"
    why = (p.get("params") or {}).get("why") if isinstance(p.get("params"), dict) else None
    head = "ESCALATED" if action == "escalate" and status == "done" else "action"
    return (f"{head} {action} {e.subject}: {intent}, {_outcome(status, str(p.get('reason') or ''))}"
            f"{_why(why)} by {p.get('actor') or '?'}")


def _page(e) -> str:
    p, what = e.payload, e.kind.split(".", 1)[1]
    if what == "sent":
        if p.get("resolved"):  # the resolve owed to Alertmanager: said by notify.resolved already
            return ""
        to = [*(p.get("local") or []), *(p.get("owed") or [])]
        return (f"page sent {e.subject} [{p.get('severity') or '?'}]: {_short(p.get('text'))}"
                + (f" (to {', '.join(str(x) for x in to)})" if to else ""))
    if what == "resolved":
        return f"page resolved {e.subject}" + (f" (to {', '.join(p['owed'])})" if p.get("owed") else "")
    return f"page {what} {e.subject}: {p.get('notifier') or '?'}{_why(p.get('reason'))}"


def _fleet(e) -> str:
    p = e.payload
    if e.kind == "main.red":
        return f"main {e.subject} red at {str(p.get('commit') or '?')[:12]}: dispatch pauses"
    if e.kind == "main.green":
        return f"main {e.subject} green at {str(p.get('commit') or '?')[:12]}"
    return "dispatch paused" if e.kind == "dispatch.paused" else "dispatch resumed"


def _adopt(e) -> str:
    p = e.payload
    if e.kind == "adopt.registered":
        return (f"adopted loop {e.subject}: pid {p.get('pid', '?')} ({p.get('cli') or '?'}, rule {p.get('rule') or '?'}) "
                f"in {p.get('worktree') or '?'}")
    if e.kind == "adopt.gone":
        return f"adopted loop {e.subject}: gone (pid {p.get('pid', '?')} ended or now another process)"
    return f"adopted loop {e.subject}: pid {p.get('pid', '?')} is no longer it; nothing signalled"


def line(e) -> str | None:
    """The one line a controller prints for event `e` (a healer.records.Event), or None when it says nothing new."""
    k = e.kind
    if k == "ticket.moved":
        text = _transition(e)
    elif k == "ticket.created":
        p = e.payload
        text = f"ticket {e.subject}: created {p.get('state', 'queued')}: {_short(p.get('title'), 80)} by {p.get('actor') or '?'}"
    elif k in _REMEDY:
        text = _action(e)
    elif k in _PAGES:
        text = _page(e)
    elif k in _FLEET:
        text = _fleet(e)
    elif k in _ADOPT:
        text = _adopt(e)
    else:
        return None
    return f"{iso(e.at)} {text}" if text else None
