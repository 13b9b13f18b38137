"""The fleet-wide actions: pause_dispatch, resume_dispatch (a pause is lifted only by whoever owns its reason),
and notify (a message to the humans, nothing changed)."""

from __future__ import annotations

from healer.actions.spec import Abort, Handler, Refuse, Target
from healer.core.fleet import why_not_resume
from healer.notify import notify
from healer.remedy.actions import Context
from healer.store import keys

PAUSED_BY_HEALER = "healer"  # dispatch.paused_reason of a pause by this action (the dispatcher's own is "main_red")


# -- pause_dispatch / resume_dispatch -----------------------------------------------

def _dispatch_target(ctx: Context, subject: str, params: dict) -> Target:
    return Target("", subject or "dispatch", params)


def _paused(ctx: Context) -> bool:
    return bool(ctx.store.get_setting(keys.DISPATCH_PAUSED, False))


def _pause_check(ctx: Context, t: Target) -> None:
    if _paused(ctx):
        raise Abort("dispatch is already paused")


def _pause_apply(ctx: Context, t: Target, intent: int) -> dict:
    # the dispatcher lifts only a pause whose reason is its own ("main_red"); ours waits for resume_dispatch
    ctx.store.set_setting(keys.DISPATCH_PAUSED_REASON, PAUSED_BY_HEALER)
    ctx.store.set_setting(keys.DISPATCH_PAUSED_BY, {"actor": ctx.actor, "why": t.params.get("why", ""), "at": ctx.now(), "intent": intent})
    ctx.store.set_setting(keys.DISPATCH_PAUSED, True, event="dispatch.paused")
    return {}


def _resume_d_check(ctx: Context, t: Target) -> None:
    why = why_not_resume(_paused(ctx), ctx.store.get_setting(keys.DISPATCH_PAUSED_REASON),
                         ctx.store.get_setting(keys.MAIN_STATUS, "green"), PAUSED_BY_HEALER, bool(t.params.get("force")))
    if why:
        raise Abort(why)


def _resume_d_apply(ctx: Context, t: Target, intent: int) -> dict:
    ctx.store.set_setting(keys.DISPATCH_PAUSED_REASON, None)
    ctx.store.set_setting(keys.DISPATCH_PAUSED_BY, None)
    ctx.store.set_setting(keys.DISPATCH_PAUSED, False, event="dispatch.unpaused")
    return {}


# -- notify -------------------------------------------------------------------------

def _notify_resolve(ctx: Context, subject: str, params: dict) -> Target:
    if not (params.get("text") or params.get("why")):
        raise Refuse("notify needs params.text")
    return Target("", subject, params)


def _notify_apply(ctx: Context, t: Target, intent: int) -> dict:
    p = t.params
    sent = notify(ctx.store, ctx.policy, p.get("key", t.subject), str(p.get("text") or p.get("why")), severity=p.get("severity", "warning"),
                  evidence=p.get("evidence"), cooldown=p.get("cooldown"))
    return {"sent": sent}


def _nothing(ctx: Context, t: Target) -> None:
    return None


# each action's handler, named by its spec (healer/actions/<name>.py: handler="healer.remedy.handlers.fleet:NAME")
PAUSE_DISPATCH = Handler(_dispatch_target, _pause_check, _pause_apply, lambda ctx, t: _paused(ctx))
RESUME_DISPATCH = Handler(_dispatch_target, _resume_d_check, _resume_d_apply, lambda ctx, t: not _paused(ctx))
NOTIFY = Handler(_notify_resolve, _nothing, _notify_apply, lambda ctx, t: True)
