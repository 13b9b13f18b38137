"""What several handlers share: reading a ticket, judging its agents live or lost, requeueing it, the targets."""

from __future__ import annotations

from typing import Any

from healer import lifecycle
from healer.actions.spec import Abort, Refuse, Target
from healer.errors import NotFound
from healer.fleet.snapshot import ended_with, liveness
from healer.paths import UnsafePath, confine
from healer.remedy.actions import Context


def ticket_or_abort(ctx: Context, tid: str):
    try:
        return ctx.store.ticket(tid)
    except NotFound as e:
        raise Abort(f"no ticket {tid!r}") from e


def live_agents(ctx: Context, tid: str, *, exclude: str | None = None) -> list[tuple[str, bool | None]]:
    """Agents on `tid` that are alive or cannot be proven dead (a destructive action treats unknown as alive)."""
    out: list[tuple[str, bool | None]] = []
    for a in ctx.store.agents(states=("running",), ticket_id=tid):
        if a.id == exclude:
            continue
        alive, _ = liveness(a, ctx.runtime, ctx.host)
        if alive is not False:
            out.append((a.id, alive))
    return out


def no_live_agent(ctx: Context, tid: str, *, exclude: str | None = None) -> None:
    live = live_agents(ctx, tid, exclude=exclude)
    if live:
        desc = ", ".join(f"{a} ({'alive' if al else 'liveness unknown'})" for a, al in live)
        raise Abort(f"{tid} has a live agent: {desc}")


def not_reaped(ctx: Context, tid: str) -> None:
    """Reap before you judge: an agent that ended with an exit status or a result is the dispatcher's to record."""
    for a in ctx.store.agents(states=("running",), ticket_id=tid):
        alive, _ = liveness(a, ctx.runtime, ctx.host)
        if alive is False:
            code = ended_with(a, ctx.runtime)
            if code is not None:
                raise Abort(f"agent {a.id} ended with exit {code}; the dispatcher records it (it is not lost)")


def mark_dead_agents(ctx: Context, tid: str) -> list[str]:
    """Agents the store still calls running but that are gone without a word: record them as lost (bookkeeping only)."""
    lost = []
    for a in ctx.store.agents(states=("running",), ticket_id=tid):
        alive, _ = liveness(a, ctx.runtime, ctx.host)
        if alive is False and ended_with(a, ctx.runtime) is None:
            ctx.store.update_agent(a.id, state="lost", ended_at=ctx.now())
            lost.append(a.id)
    return lost


def requeue(ctx: Context, tid: str, reason: str, *, resume: bool, agent=None) -> dict:
    lost = mark_dead_agents(ctx, tid)
    if resume:
        data: dict[str, Any] = {"resume": True}
        if agent is not None:
            data.update(resume_worktree=agent.worktree, resume_run=agent.run_id, resume_agent=agent.id)
        ctx.store.set_ticket_data(tid, **data)
    t = ctx.store.ticket(tid)
    if t.state == lifecycle.IN_PROGRESS:
        ctx.store.move_ticket(tid, lifecycle.QUEUED, actor=ctx.actor, reason=reason, expect=lifecycle.IN_PROGRESS)
    return {"lost_agents": lost, "resume": resume}


def ticket_target(ctx: Context, subject: str, params: dict) -> Target:
    try:
        ctx.store.ticket(subject)
    except NotFound as e:
        raise Refuse(f"no ticket {subject!r}") from e
    return Target("", subject, params, ticket=subject)


def agent_target(ctx: Context, subject: str, params: dict) -> Target:
    try:
        a = ctx.store.agent(subject)
    except NotFound:
        # a ticket id names its most recent agent
        cands = ctx.store.agents(ticket_id=subject)
        if not cands:
            raise Refuse(f"no agent (or ticket with an agent) {subject!r}") from None
        a = cands[-1]
    return Target("", subject, params, ticket=a.ticket_id, agent=a.id)


def path_target(ctx: Context, subject: str, params: dict) -> Target:
    try:
        p = confine(ctx.root, subject)
    except UnsafePath as e:
        raise Refuse(str(e)) from e
    return Target("", subject, params, path=p)
