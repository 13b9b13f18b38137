"""The actions on a ticket: close_dead_ticket, drop_label, requeue_ticket, unblock_ticket, escalate."""

from __future__ import annotations

import json

from healer import conventions as cv
from healer import lifecycle
from healer.actions.spec import Abort, Handler, Refuse, Target
from healer.errors import NotFound
from healer.notify import notify
from healer.remedy.actions import Context
from healer.remedy.handlers.common import (
    live_agents,
    mark_dead_agents,
    no_live_agent,
    not_reaped,
    requeue,
    ticket_or_abort,
    ticket_target,
)


def _ticket(t: Target) -> str:
    """The ticket a ticket action acts on (ticket_target sets it; an intent recovered without one is refused)."""
    if t.ticket is None:
        raise Abort(f"{t.action} {t.subject}: no ticket")
    return t.ticket


# -- close_dead_ticket --------------------------------------------------------------

def _close_check(ctx: Context, t: Target) -> None:
    tk = ticket_or_abort(ctx, _ticket(t))
    if tk.state == lifecycle.CLOSED:
        raise Abort(f"{t.ticket} is already closed")
    _expect(tk, t)
    no_live_agent(ctx, _ticket(t))


def _expect(tk, t: Target) -> None:
    want = t.params.get("expect")
    if want and tk.state != want:
        raise Abort(f"{tk.id} is {tk.state} now, not {want} as when it was planned")


def _close_apply(ctx: Context, t: Target, intent: int) -> dict:
    tk = ctx.store.ticket(t.ticket)
    if tk.state != lifecycle.CLOSED:
        # compare-and-set on the state it was judged in, not the one read now: a dispatcher that finished its merge
        # between the check and this move (review -> done, e.g. a store restart between the merge's two steps) wins,
        # and the intent aborts instead of closing a done ticket (pg-restarts-real found it)
        _expect(tk, t)
        mark_dead_agents(ctx, _ticket(t))
        ctx.store.move_ticket(t.ticket, lifecycle.CLOSED, actor=ctx.actor, reason=t.params.get("why", "dead ticket"),
                              expect=t.params.get("expect") or tk.state)
    return {"from": tk.state}


def _close_verify(ctx: Context, t: Target) -> bool:
    return ctx.store.ticket(t.ticket).state == lifecycle.CLOSED


# -- drop_label ---------------------------------------------------------------------

def _label_resolve(ctx: Context, subject: str, params: dict) -> Target:
    if not params.get("label"):
        raise Refuse("drop_label needs params.label")
    return ticket_target(ctx, subject, params)


def _label_check(ctx: Context, t: Target) -> None:
    label = t.params["label"]
    tk = ticket_or_abort(ctx, _ticket(t))
    if label not in tk.labels:
        raise Abort(f"{t.ticket} no longer has label {label!r}")
    seen = t.params.get("added_at")
    if seen is not None and abs(float(tk.labels[label]) - float(seen)) > 1e-6:
        raise Abort(f"{t.ticket}: label {label!r} was added again since it was judged stale")


def _label_apply(ctx: Context, t: Target, intent: int) -> dict:
    removed = ctx.store.unlabel(t.ticket, t.params["label"], actor=ctx.actor)
    return {"removed": removed}


def _label_verify(ctx: Context, t: Target) -> bool:
    return t.params["label"] not in ctx.store.ticket(t.ticket).labels


# -- requeue_ticket -----------------------------------------------------------------

def _requeue_check(ctx: Context, t: Target) -> None:
    tk = ticket_or_abort(ctx, _ticket(t))
    if tk.state != lifecycle.IN_PROGRESS:
        raise Abort(f"{t.ticket} is {tk.state}, not in_progress")
    no_live_agent(ctx, _ticket(t))
    not_reaped(ctx, _ticket(t))


def _requeue_apply(ctx: Context, t: Target, intent: int) -> dict:
    return requeue(ctx, _ticket(t), t.params.get("why", "requeue: no live agent"), resume=bool(t.params.get("resume", False)))


def _requeue_verify(ctx: Context, t: Target) -> bool:
    return ctx.store.ticket(t.ticket).state == lifecycle.QUEUED


# -- unblock_ticket -----------------------------------------------------------------

def _unblock_check(ctx: Context, t: Target) -> None:
    """Still blocked, and still nothing blocks it: its blockers done or closed, no wait label, no rejected proposal
    (a ticket the dispatcher blocked after its replays ran out is a human's), no live agent."""
    tk = ticket_or_abort(ctx, _ticket(t))
    if tk.state != lifecycle.BLOCKED:
        raise Abort(f"{t.ticket} is {tk.state}, not blocked")
    wait = (set(ctx.policy.fleet.wait_labels) | set(ctx.policy.health.stale_labels)) & set(tk.labels)
    if wait:
        raise Abort(f"{t.ticket} carries wait label(s) {', '.join(sorted(wait))}")
    for b in tk.blocked_by:
        try:
            bt = ctx.store.ticket(b)
        except NotFound:
            raise Abort(f"{t.ticket} is blocked by {b}, which is not on the board") from None
        if bt.state not in lifecycle.TERMINAL:
            raise Abort(f"{t.ticket} is still blocked by {b} ({bt.state})")
    if any(p.state == "rejected" for p in ctx.store.proposals(t.ticket)):
        raise Abort(f"{t.ticket} had a proposal rejected: blocked after its replays, a human's decision")
    no_live_agent(ctx, _ticket(t))


def _unblock_apply(ctx: Context, t: Target, intent: int) -> dict:
    ctx.store.move_ticket(t.ticket, lifecycle.QUEUED, actor=ctx.actor, expect=lifecycle.BLOCKED,
                          reason=t.params.get("why", "unblocked: nothing blocks it any more"))
    return {"to": lifecycle.QUEUED}


def _unblock_verify(ctx: Context, t: Target) -> bool:
    return ctx.store.ticket(t.ticket).state == lifecycle.QUEUED


# -- escalate -----------------------------------------------------------------------

def _esc_check(ctx: Context, t: Target) -> None:
    tk = ticket_or_abort(ctx, _ticket(t))
    if tk.state == lifecycle.CLOSED:
        raise Abort(f"{t.ticket} is closed")


def _esc_apply(ctx: Context, t: Target, intent: int) -> dict:
    tid = _ticket(t)
    text = t.params.get("text") or f"{tid} needs a human: {t.params.get('why', 'remediation exhausted')}"
    evidence = t.params.get("evidence") or {}
    ctx.store.label(tid, cv.NEEDS_HUMAN_LABEL, actor=ctx.actor)
    marker = f"[healer intent #{intent}]"
    if not any(marker in c.body for c in ctx.store.comments(tid)):
        body = f"{text}\n\n{marker} evidence:\n```json\n{json.dumps(evidence, indent=2, sort_keys=True, default=str)}\n```"
        ctx.store.comment(tid, body, author=ctx.actor)
    moved = False
    tk = ctx.store.ticket(tid)
    if t.params.get("move", True) and tk.state != lifecycle.NEEDS_HUMAN \
            and (tk.state, lifecycle.NEEDS_HUMAN) in lifecycle.TRANSITIONS and not live_agents(ctx, tid):
        ctx.store.move_ticket(tid, lifecycle.NEEDS_HUMAN, actor=ctx.actor, reason="escalated", expect=tk.state)
        moved = True
    sent = notify(ctx.store, ctx.policy, f"escalate:{tid}", text, severity="critical", evidence=evidence)
    return {"moved": moved, "notified": sent}


def _esc_verify(ctx: Context, t: Target) -> bool:
    return cv.NEEDS_HUMAN_LABEL in ctx.store.ticket(t.ticket).labels


# each action's handler, named by its spec (healer/actions/<name>.py: handler="healer.remedy.handlers.tickets:NAME")
CLOSE_DEAD_TICKET = Handler(ticket_target, _close_check, _close_apply, _close_verify)
DROP_LABEL = Handler(_label_resolve, _label_check, _label_apply, _label_verify)
REQUEUE_TICKET = Handler(ticket_target, _requeue_check, _requeue_apply, _requeue_verify)
UNBLOCK_TICKET = Handler(ticket_target, _unblock_check, _unblock_apply, _unblock_verify)
ESCALATE = Handler(ticket_target, _esc_check, _esc_apply, _esc_verify)
