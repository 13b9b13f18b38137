"""The remediation executor: the only code that changes the fleet on the healer's behalf.

Theory of operation. Every registered action (healer/actions/, `ActionSpec`) runs
the same path, whoever asks (the supervisor, the MCP repair server, a game day):

    refuse?  whitelist, policy `allowed`, .healer/HALT / observe_only, target
             confined to the fleet root, per-action rate limit, per-ticket quiet period
    journal  plan_intent                              -> failpoint remedy.after_intent
    check    preconditions again, on FRESH state      -> aborted when they no longer hold
    begin    set_intent(begun)                        -> failpoint remedy.after_begun
    effect   the action, idempotent step by step      -> failpoint remedy.after_effect
    verify   read the world back                      -> set_intent(done | aborted)
                                                       -> failpoint remedy.after_done

Every outcome is an event: `remedy.done`, `remedy.refused`, `remedy.aborted`,
`remedy.failed` (reason in the payload). `recover()` finishes or rolls back the
intents a dead process left behind: a `planned` one never acted and is rolled back
(aborted); a `begun` one is verified, and if its effect is not in place it is checked
again and completed. Each effect is idempotent, so finishing one twice is harmless.

Handlers are small (check, apply, verify) and share nothing but the Context; the built-in
ones live in healer/remedy/handlers/, grouped by what they act on. Each action's spec
(healer/actions/<name>.py) names its handler; the executor reads it from the registry
(`handler()`), so a registered spec is all an action needs.
"""

from __future__ import annotations

import importlib
import itertools
import os
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from healer import actions as registry
from healer import failpoints, lifecycle, procs, switches
from healer.actions.spec import Abort, Handler, Refuse, Target
from healer.clock import Clock
from healer.core.model import PlannedAction
from healer.errors import NotFound
from healer.fleet.ports import REAL
from healer.fleet.snapshot import HOST
from healer.paths import UnsafePath
from healer.remedy import limiter

FP_AFTER_INTENT = failpoints.declare("remedy.after_intent", "healer/remedy/actions.py: intent planned, preconditions not yet re-checked")
FP_AFTER_BEGUN = failpoints.declare("remedy.after_begun", "healer/remedy/actions.py: intent begun, effect not yet applied")
FP_AFTER_EFFECT = failpoints.declare("remedy.after_effect", "healer/remedy/actions.py: effect applied, not yet verified or journaled done")
FP_AFTER_DONE = failpoints.declare("remedy.after_done", "healer/remedy/actions.py: intent journaled done or aborted")

DONE, REFUSED, ABORTED, FAILED = "done", "refused", "aborted", "failed"
HALT_FILE = ".healer/HALT"


@dataclass
class Context:
    root: Path
    store: Any
    policy: Any
    clock: Clock
    runtime: Any = None  # healer.fleet.runtime.Runtime | None
    actor: str = "supervisor"
    batch: str | None = None  # actions of one batch (one tick, one repair run) are one attempt on a ticket
    host: str = HOST
    processes: Any = None  # healer.fleet.ports.Processes (the process table); None: this machine's
    git: Any = None  # healer.fleet.ports.Git; None: this machine's (healer.git)
    proctable: Any = None  # healer.adopt.ProcTable (adopted loops' identities); None: this machine's /proc

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()

    def busy_pids(self, path: Path) -> list[int]:
        """Processes with a cwd or an open file inside `path`."""
        if self.processes is None:
            return procs.busy_pids(path)
        p = Path(path).resolve()
        return list(self.processes.busy([p]).get(p, ()))

    def now(self) -> float:
        return self.clock.now()

    def repo(self):
        """The Git port the actions use (the simulated world's, or this machine's git)."""
        if self.git is None:
            self.git = REAL.git
        return self.git

    def halted(self) -> str | None:
        if (self.root / HALT_FILE).exists():
            return f"halted: {HALT_FILE} exists (observe-only)"
        if self.policy.remediation.observe_only:
            return "halted: policy remediation.observe_only is true"
        return None


@dataclass(frozen=True)
class Outcome:
    status: str  # done | refused | aborted | failed
    reason: str
    intent_id: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == DONE


# -- the handlers: each action's, read from its spec ---------------------------------

def _shell_half(spec) -> Handler:
    ref = spec.handler
    if isinstance(ref, str):  # "module:NAME": the registry names the shell without importing it
        module, _, attr = ref.partition(":")
        ref = getattr(importlib.import_module(module), attr)
    if not all(callable(getattr(ref, part, None)) for part in ("resolve", "check", "apply", "verify")):
        raise TypeError(f"action {spec.name}: its handler {spec.handler!r} is no Handler (resolve, check, apply, verify)")
    return ref


class _Handlers(MutableMapping):
    """action -> its Handler, read from its spec (healer/actions/) on every look-up, so an action registered
    later has one and nothing goes stale; a test may set one to wrap the real one."""

    def __init__(self) -> None:
        self._set: dict[str, Handler] = {}

    def __getitem__(self, name: str) -> Handler:
        if name in self._set:
            return self._set[name]
        if name not in registry.ACTIONS:
            raise KeyError(name)
        return _shell_half(registry.get(name))

    def __setitem__(self, name: str, h: Handler) -> None:
        self._set[name] = h

    def __delitem__(self, name: str) -> None:
        del self._set[name]

    def __iter__(self):
        return iter(registry.names())

    def __len__(self) -> int:
        return len(registry.names())


HANDLERS = _Handlers()


def handler(name: str) -> Handler:
    """The shell's half of a registered action (UnknownAction for any other name)."""
    try:
        return HANDLERS[name]
    except KeyError:
        raise registry.UnknownAction(name) from None


# -- the path -----------------------------------------------------------------------

def _record(ctx: Context, out: Outcome, action: str, subject: str, params: dict) -> Outcome:
    ctx.store.append(f"remedy.{out.status}", subject, {"action": action, "reason": out.reason, "intent": out.intent_id,
                                                      "actor": ctx.actor, "params": params, "detail": out.detail})
    return out


def _resolve(ctx: Context, action: str, subject: str, params: dict) -> Target:
    h = handler(action)
    t = h.resolve(ctx, subject, params)
    t.action = action
    return t


def _me() -> dict:
    pid = os.getpid()
    return {"pid": pid, "pid_start": procs.mark(pid) or ""}


def execute(ctx: Context, action: PlannedAction) -> Outcome:
    """Carry out one planned action on the whitelist; never raises for a refusal or a failed effect."""
    name, subject, params = action.action, action.subject, dict(action.params or {})
    if name not in registry.ACTIONS:
        return _record(ctx, Outcome(REFUSED, f"unknown action {name!r}; the whitelist is {', '.join(registry.names())}"), str(name), subject, params)
    if name not in ctx.policy.remediation.allowed:
        return _record(ctx, Outcome(REFUSED, f"{name} is not in policy remediation.allowed"), name, subject, params)
    halted = ctx.halted()
    if halted:
        return _record(ctx, Outcome(REFUSED, halted), name, subject, params)
    try:
        target = _resolve(ctx, name, subject, params)
    except Refuse as e:
        return _record(ctx, Outcome(REFUSED, str(e)), name, subject, params)
    now = ctx.now()
    why = limiter.rate_limited(ctx.store, ctx.policy, name, now)
    if why is None and target.ticket and name in limiter.ATTEMPT_ACTIONS:
        why = limiter.quiet_period(ctx.store, ctx.policy, target.ticket, now, batch=ctx.batch)
    if why:
        return _record(ctx, Outcome(REFUSED, why), name, subject, params)

    run = next(_RUNS)
    _IN_FLIGHT.add(run)  # before the intent exists: no moment when it is journaled but not known to be ours and live
    journal = {"subject": subject, "params": params, "ticket": target.ticket, "_batch": ctx.batch, "_host": ctx.host,
               "_run": run, **_me()}
    if action.rule:  # which rule acted: a game day's report counts each rule's firings from it (issue 41)
        journal["rule"] = action.rule
    # a ticket's attempts are journaled under the ticket, so its lease is one indexed look-up
    on_ticket = target.ticket if (target.ticket and (name in limiter.ATTEMPT_ACTIONS or name == "escalate")) else None
    try:
        intent = ctx.store.plan_intent(name, on_ticket or subject, journal, actor=ctx.actor,
                                       reason=action.reason or (action.rule or ""))
    except BaseException:
        _IN_FLIGHT.discard(run)
        raise
    try:
        failpoints.hit(FP_AFTER_INTENT)
        return _run(ctx, target, intent.id, fresh=True)
    finally:
        _IN_FLIGHT.discard(run)


# the executions a thread of this process is carrying out now (journal key `_run`): `recover()` in another thread of
# the same process (the console steering beside the supervisor in `healer up`) must not take their intents for a dead
# process's leftovers and finish them under the running thread's feet
_IN_FLIGHT: set[int] = set()
_RUNS = itertools.count(1)


def _run(ctx: Context, t: Target, intent_id: int, *, fresh: bool, recovered: bool = False) -> Outcome:
    """From a planned (fresh) or begun (recovery) intent to done or aborted."""
    h = handler(t.action)
    extra = {"recovered": True} if recovered else {}
    if fresh:
        try:
            halted = ctx.halted()
            if halted:
                raise Abort(halted)
            h.check(ctx, t)
        except (Abort, UnsafePath, NotFound, lifecycle.InvalidTransition) as e:
            return _finish(ctx, t, intent_id, Outcome(ABORTED, str(e), intent_id, extra))
        ctx.store.set_intent(intent_id, "begun")
        failpoints.hit(FP_AFTER_BEGUN)
    try:
        detail = h.apply(ctx, t, intent_id)
    except failpoints.FailpointError:
        raise
    except (Abort, UnsafePath, NotFound, lifecycle.InvalidTransition) as e:
        return _finish(ctx, t, intent_id, Outcome(ABORTED, str(e), intent_id, extra))
    except Exception as e:  # noqa: BLE001 - an effect that breaks is journaled, never crashes the caller
        return _finish(ctx, t, intent_id, Outcome(FAILED, f"{type(e).__name__}: {e}", intent_id, extra))
    failpoints.hit(FP_AFTER_EFFECT)
    try:
        ok = h.verify(ctx, t)
    except Exception as e:  # noqa: BLE001
        return _finish(ctx, t, intent_id, Outcome(FAILED, f"verification raised {type(e).__name__}: {e}", intent_id, {**detail, **extra}))
    if not ok:
        return _finish(ctx, t, intent_id, Outcome(FAILED, "verification failed: the effect is not in place", intent_id, {**detail, **extra}))
    return _finish(ctx, t, intent_id, Outcome(DONE, "ok", intent_id, {**detail, **extra}))


def _finish(ctx: Context, t: Target, intent_id: int, out: Outcome) -> Outcome:
    state = "done" if out.status == DONE else "aborted"
    ctx.store.set_intent(intent_id, state, {"status": out.status, "reason": out.reason, "detail": out.detail})
    failpoints.hit(FP_AFTER_DONE)
    return _record(ctx, out, t.action, t.subject, t.params)


# -- recovery -----------------------------------------------------------------------

def _owner_alive(it, host: str, now: float, stale_after: float) -> bool:
    """Is the process that journaled this intent still running (so it is not ours to recover)?

    On another host its pid means nothing here: it is presumed alive until the intent is older
    than `stale_after` (the supervisor lease ttl), then recovered like any orphan."""
    p = it.params
    pid = p.get("pid")
    if p.get("_host", host) != host:
        return now - it.updated_at < stale_after
    if not pid:
        return False
    if pid == os.getpid():
        return p.get("_run") in _IN_FLIGHT  # another thread of ours is on it; else our own leftover (an exception mid-action)
    m = p.get("pid_start") or p.get("ctime")  # ctime: a wall-clock create time written by an older healer
    return bool(m) and procs.same(int(pid), m)  # no record of who owned it: nobody to wait for


def recover(ctx: Context) -> list[Outcome]:
    """Finish or roll back every half-done intent whose owner is gone. Safe to call every tick."""
    outs: list[Outcome] = []
    if not switches.enabled("intent_recovery"):  # a game day proving its crash scenarios can fail
        return outs
    for it in ctx.store.intents(states=("planned", "begun")):
        if _owner_alive(it, ctx.host, ctx.now(), ctx.policy.supervisor.lease_ttl):
            continue
        subject = it.params.get("subject", it.subject)
        params = it.params.get("params", {})
        if it.action not in registry.ACTIONS:
            ctx.store.set_intent(it.id, "aborted", {"status": ABORTED, "reason": f"unknown action {it.action!r}", "recovered": True})
            continue
        if it.state == "planned":
            out = Outcome(ABORTED, "rolled back: interrupted before it began", it.id, {"recovered": True})
            ctx.store.set_intent(it.id, "aborted", {"status": out.status, "reason": out.reason, "detail": out.detail})
            outs.append(_record(ctx, out, it.action, subject, params))
            continue
        try:
            t = _resolve(ctx, it.action, subject, params)
        except (Refuse, NotFound) as e:
            out = Outcome(ABORTED, f"recovery: {e}", it.id, {"recovered": True})
            ctx.store.set_intent(it.id, "aborted", {"status": out.status, "reason": out.reason, "detail": out.detail})
            outs.append(_record(ctx, out, it.action, subject, params))
            continue
        h = handler(it.action)
        try:
            already = h.verify(ctx, t)
        except Exception:  # noqa: BLE001
            already = False
        if already:
            out = Outcome(DONE, "recovered: the effect was already in place", it.id, {"recovered": True})
            outs.append(_finish(ctx, t, it.id, out))
            continue
        try:
            h.check(ctx, t)
        except (Abort, UnsafePath, NotFound, lifecycle.InvalidTransition) as e:
            outs.append(_finish(ctx, t, it.id, Outcome(ABORTED, f"recovery: {e}", it.id, {"recovered": True})))
            continue
        outs.append(_run(ctx, t, it.id, fresh=False, recovered=True))
    return outs
