"""The operator's actions (the console's steering, docs/console.md): release_ticket, ack_page. They run the executor's
one path like every other action (refusals, intent journal, preconditions on fresh state, verification)."""

from __future__ import annotations

from healer import conventions as cv
from healer import lifecycle
from healer.actions.spec import Abort, Handler, Refuse, Target
from healer.notify import open_alerts, resolve
from healer.remedy.actions import Context
from healer.remedy.handlers.common import no_live_agent, ticket_or_abort, ticket_target

# -- release_ticket -------------------------------------------------------------------

def _release_check(ctx: Context, t: Target) -> None:
    if t.ticket is None:
        raise Abort(f"{t.subject}: names no ticket")
    tk = ticket_or_abort(ctx, t.ticket)
    if tk.state != lifecycle.NEEDS_HUMAN:
        raise Abort(f"{t.ticket} is {tk.state}, not needs_human")
    no_live_agent(ctx, t.ticket)


def _release_apply(ctx: Context, t: Target, intent: int) -> dict:
    tk = ctx.store.ticket(t.ticket)
    dropped = ctx.store.unlabel(t.ticket, cv.NEEDS_HUMAN_LABEL, actor=ctx.actor) if cv.NEEDS_HUMAN_LABEL in tk.labels else False
    if tk.state == lifecycle.NEEDS_HUMAN:  # compare-and-set: a human who closed it meanwhile wins
        ctx.store.move_ticket(t.ticket, lifecycle.QUEUED, actor=ctx.actor, expect=lifecycle.NEEDS_HUMAN,
                              reason=t.params.get("why", "released by an operator"))
    return {"label_dropped": bool(dropped)}


def _release_verify(ctx: Context, t: Target) -> bool:
    tk = ctx.store.ticket(t.ticket)
    return tk.state == lifecycle.QUEUED and cv.NEEDS_HUMAN_LABEL not in tk.labels


# -- ack_page -------------------------------------------------------------------------

def _last(ctx: Context, kind: str, key: str):
    evs = ctx.store.events(kinds=[kind], subject=key)
    return evs[-1] if evs else None


def _ack_resolve(ctx: Context, subject: str, params: dict) -> Target:
    if not subject or _last(ctx, "notify.sent", subject) is None:
        raise Refuse(f"no page was sent under the key {subject!r}")
    return Target("", subject, params)


def _acked_since_sent(ctx: Context, key: str) -> bool:
    sent, acked = _last(ctx, "notify.sent", key), _last(ctx, "notify.acked", key)
    return sent is not None and acked is not None and acked.id > sent.id


def _ack_check(ctx: Context, t: Target) -> None:
    if _acked_since_sent(ctx, t.subject):
        raise Abort(f"the page {t.subject} is already acknowledged")


def _ack_apply(ctx: Context, t: Target, intent: int) -> dict:
    sent = _last(ctx, "notify.sent", t.subject)
    told = open_alerts(ctx.store, ctx.policy).get(t.subject)
    resolved = resolve(ctx.store, ctx.policy, t.subject, told, text=f"{t.subject} acknowledged by {ctx.actor}") if told else False
    ctx.store.append("notify.acked", t.subject, {"actor": ctx.actor, "sent": sent.id if sent else None,
                                                 "resolved": resolved, "intent": intent})
    return {"resolved": resolved}


# each action's handler, named by its spec (healer/actions/<name>.py: handler="healer.remedy.handlers.operator:NAME")
RELEASE_TICKET = Handler(ticket_target, _release_check, _release_apply, _release_verify)
ACK_PAGE = Handler(_ack_resolve, _ack_check, _ack_apply, lambda ctx, t: _acked_since_sent(ctx, t.subject))
