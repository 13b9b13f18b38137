"""The operator's steering: each button of the console is one registered action (healer/actions/), run by the
executor's one path (healer/remedy/actions.py: whitelist, HALT, rate limit, quiet period, intent journal,
preconditions on fresh state, verification), with actor `operator:<name>`; `healer journal` shows it under that
name. Nothing here changes the fleet by itself, and nothing deletes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from healer import lifecycle
from healer.core.model import PlannedAction
from healer.errors import NotFound


@dataclass(frozen=True)
class Steer:
    action: str  # the registered action it runs
    what: str  # one line for the page and docs/console.md
    params: Callable[[str, str], dict[str, Any]]  # (subject, why) -> the action's params


def _ticket(subject: str, why: str) -> dict[str, Any]:
    return {"ticket": subject, "why": why}


STEERS: dict[str, Steer] = {
    "pause": Steer("pause_dispatch", "stop launching new agents", lambda s, why: {"by": "operator", "why": why}),
    "resume": Steer("resume_dispatch", "lift a dispatch pause (not one main's red gates hold)", lambda s, why: {"why": why}),
    "requeue": Steer("requeue_ticket", "put an in-progress ticket with no live agent back in the queue",
                     lambda s, why: {**_ticket(s, why), "expect": lifecycle.IN_PROGRESS}),
    "stop": Steer("stop_agent", "stop a live agent (its ticket requeued to resume)",
                  lambda s, why: {"agent": s, "mark_for_resume": True, "why": why}),
    "escalate": Steer("escalate", "hand a ticket to a human (needs_human, evidence comment, critical alert)",
                      lambda s, why: {**_ticket(s, why), "finding": "operator", "evidence": {"by": "console"}}),
    "release": Steer("release_ticket", "hand a needs_human ticket back to the queue", _ticket),
    "ack": Steer("ack_page", "acknowledge a page (resolved where notifiers take resolves)", lambda s, why: {"why": why}),
}


class Steering:
    """The console's executor context: its own store connection, the fleet's policy and a runtime to judge liveness
    and stop agents, as the supervisor builds them. One action at a time (a lock): a steer is a human's pace."""

    def __init__(self, root, store, policy, clock, runtime, actor: str) -> None:
        self.root, self.store, self.policy, self.clock, self.runtime, self.actor = root, store, policy, clock, runtime, actor
        self._lock = threading.Lock()

    def run(self, name: str, subject: str) -> dict[str, Any]:
        from healer.remedy import actions as remedy  # lazy: pulls the executor and its handlers: 60 ms of `console` start

        st = STEERS.get(name)
        if st is None:
            raise NotFound(f"no steering action {name!r}; the known ones are {', '.join(STEERS)}")
        subject = (subject or "").strip()[:200]
        if name in ("pause", "resume"):
            subject = "dispatch"
        if not subject:
            return {"action": st.action, "subject": "", "status": "refused", "reason": "no subject given", "actor": self.actor}
        why = f"{self.actor} from the console"
        ctx = remedy.Context(self.root, self.store, self.policy, self.clock, self.runtime, actor=self.actor)
        with self._lock:
            try:
                out = remedy.execute(ctx, PlannedAction(st.action, subject, st.params(subject, why), reason="console"))
            except Exception as e:  # noqa: BLE001 - the store away, a lost lease: the operator gets the one line, the log the rest
                from loguru import logger  # lazy: loaded by every daemon already (0 ms)

                logger.opt(exception=e).warning("console: {} {} failed", st.action, subject)
                return {"action": st.action, "subject": subject, "status": "failed", "reason": f"{type(e).__name__}: {e}",
                        "actor": self.actor}
        return {"action": st.action, "subject": subject, "status": out.status, "reason": out.reason, "intent": out.intent_id,
                "actor": self.actor}
