"""The actions on an agent: resume_agent (requeue a dead agent's ticket to resume its run), stop_agent."""

from __future__ import annotations

from typing import Any

from healer import lifecycle, procs
from healer.actions.spec import Abort, Handler, Target
from healer.errors import HealerError
from healer.fleet.snapshot import ended_with, handle_of, liveness
from healer.remedy.actions import Context
from healer.remedy.handlers.common import agent_target, live_agents, no_live_agent, requeue, ticket_or_abort

# -- resume_agent -------------------------------------------------------------------

def _resume_check(ctx: Context, t: Target) -> None:
    a = ctx.store.agent(t.agent)
    alive, _ = liveness(a, ctx.runtime, ctx.host)
    if alive is None:
        raise Abort(f"cannot tell whether agent {a.id} is alive; not resuming over it")
    if alive:
        raise Abort(f"agent {a.id} is alive")
    if a.ticket_id is None:
        raise Abort(f"agent {a.id} has no ticket")
    code = ended_with(a, ctx.runtime)
    if code is not None:
        raise Abort(f"agent {a.id} ended with exit {code}; the dispatcher records it (it is not lost)")
    # an agent that just exited is the dispatcher's to reap (it records the exit and resumes by itself);
    # the supervisor steps in only when that has not happened within two dispatcher periods
    grace = 2 * max(ctx.policy.fleet.dispatch_tick, ctx.policy.fleet.heartbeat)
    last = max(a.heartbeat_at or 0.0, a.started_at or 0.0)
    if ctx.now() - last < grace:
        raise Abort(f"agent {a.id} was seen {round(ctx.now() - last)}s ago; the dispatcher gets {round(grace)}s to reap it first")
    tk = ticket_or_abort(ctx, a.ticket_id)
    if tk.state != lifecycle.IN_PROGRESS:
        raise Abort(f"{tk.id} is {tk.state}, not in_progress")
    no_live_agent(ctx, a.ticket_id, exclude=a.id)


def _resume_apply(ctx: Context, t: Target, intent: int) -> dict:
    a = ctx.store.agent(t.agent)
    return requeue(ctx, a.ticket_id, f"resume after agent {a.id} died", resume=True, agent=a)


def _resume_verify(ctx: Context, t: Target) -> bool:
    tk = ctx.store.ticket(t.ticket)
    return tk.state == lifecycle.QUEUED and bool(tk.data.get("resume"))


# -- stop_agent ---------------------------------------------------------------------

def _wants_resume(t: Target) -> bool:
    return bool(t.params.get("resume", t.params.get("mark_for_resume", True)))


def _stop_check(ctx: Context, t: Target) -> None:
    a = ctx.store.agent(t.agent)
    alive, _ = liveness(a, ctx.runtime, ctx.host)
    if alive is None:
        raise Abort(f"cannot tell whether agent {a.id} is alive (another host or runtime error)")
    if alive is False:
        pending = (_wants_resume(t) and a.ticket_id
                   and ctx.store.ticket(a.ticket_id).state == lifecycle.IN_PROGRESS)
        if not pending:
            raise Abort(f"agent {a.id} is already stopped")


def _stop_apply(ctx: Context, t: Target, intent: int) -> dict:
    a = ctx.store.agent(t.agent)
    alive, _ = liveness(a, ctx.runtime, ctx.host)
    grace = ctx.policy.loop.kill_grace
    if alive:
        if ctx.runtime is not None and getattr(ctx.runtime, "kind", a.kind) == a.kind:
            ctx.runtime.stop(handle_of(a), grace)
        elif a.kind == "process" and a.pid:
            procs.ProcessTree(a.pid, (a.data or {}).get("marker")).kill(grace, ctx.clock)
        else:
            raise HealerError(f"no runtime can stop a {a.kind} agent here")
    if ctx.store.agent(a.id).state == "running":  # read again: the dispatcher may have recorded its end during the grace
        try:
            ctx.store.update_agent(a.id, state="stopped", ended_at=ctx.now())
        except lifecycle.InvalidTransition:
            pass  # it did, between that read and this write (exited, or lost): ended either way, as asked
    detail: dict[str, Any] = {"was_alive": bool(alive)}
    if _wants_resume(t) and a.ticket_id and ctx.store.ticket(a.ticket_id).state == lifecycle.IN_PROGRESS \
            and not live_agents(ctx, a.ticket_id, exclude=a.id):
        detail.update(requeue(ctx, a.ticket_id, f"agent {a.id} stopped ({t.params.get('why', 'stuck')}); resume", resume=True, agent=a))
    return detail


def _stop_verify(ctx: Context, t: Target) -> bool:
    a = ctx.store.agent(t.agent)
    alive, _ = liveness(a, ctx.runtime, ctx.host)
    if alive is not False:
        return False
    if _wants_resume(t) and a.ticket_id:
        return ctx.store.ticket(a.ticket_id).state != lifecycle.IN_PROGRESS
    return True


# each action's handler, named by its spec (healer/actions/<name>.py: handler="healer.remedy.handlers.agents:NAME")
RESUME_AGENT = Handler(agent_target, _resume_check, _resume_apply, _resume_verify)
STOP_AGENT = Handler(agent_target, _stop_check, _stop_apply, _stop_verify)
