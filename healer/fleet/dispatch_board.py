"""What the dispatcher's collaborators share, each handed to them by the Dispatcher (healer/fleet/dispatcher.py):
who this dispatcher is (`Identity`), its compare-and-set ticket moves (`TicketMover`), the core's effects carried
out (`EffectApplier`), where main is (`MainRef`), an agent's runtime handle (`handle_of`), the routing of the pure
pass's steps to the collaborator that carries each out (`answerer`) and the game-day switches it obeys.

No collaborator reaches into another or into the Dispatcher: what one needs of another is passed to its
constructor, so each is built, type-checked (`make lint`) and tested alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from healer import conventions as cv
from healer import git, lifecycle, switches
from healer.core import dispatch_pass as P
from healer.core.fleet import Effect
from healer.fleet import shared_main
from healer.fleet.runtime import Handle
from healer.notify import notify
from healer.records import Agent
from healer.store.base import Store

if TYPE_CHECKING:
    from healer.policy.schema import Policy

ACTOR = cv.DISPATCH_ACTOR


@dataclass(frozen=True)
class Identity:
    """Who this dispatcher is: the host it dispatches as, this boot and fleet root (healer/fleet/lost_hosts.py
    machine_id: rows an earlier host id wrote here are ours, issue 40), and the lease holder it writes as."""

    host: str
    machine: str
    holder: str


def switches_now() -> P.Switches:
    """The game-day switches the pure pass obeys, read here (the core reads no environment)."""
    return P.Switches(fail_open=switches.enabled("fail_open"), infra_endings=switches.enabled("infra_endings"),
                      host_takeback=switches.enabled("host_takeback"))


def answerer(*tables: Mapping[type, Callable[[Any], Any]]) -> Callable[[Any], Any]:
    """One function answering each step of the pure pass (healer/core/dispatch_pass.py) by its type, from the
    collaborators' tables; a step nobody answers is a bug, never skipped."""
    route: dict[type, Callable[[Any], Any]] = {}
    for t in tables:
        route.update(t)

    def answer(step: Any) -> Any:
        try:
            how = route[type(step)]
        except KeyError:
            raise TypeError(f"no collaborator carries out {type(step).__name__}") from None
        return how(step)

    return answer


def handle_of(a: Agent) -> Handle:
    """The runtime's handle on an agent the store recorded."""
    return Handle(kind=a.kind, pid=a.pid, container=a.container, marker=a.data.get("marker"))


def agent_id_for(ticket_id: str, attempt_id: int) -> str:
    return f"agent-{ticket_id}-{attempt_id}"


def ours(a: Agent) -> bool:
    """An agent this fleet's dispatcher launched (on any host)."""
    return a.data.get("launched_by") == ACTOR


class TicketMover:
    """The dispatcher's ticket moves: compare-and-set, a ticket someone else moved meanwhile left alone (and the
    refusal logged)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def move(self, tid: str, to: str, reason: str, expect: str | None = None) -> bool:
        if expect is not None and not switches.enabled("move_cas"):  # a game day proving the compare-and-set can fail
            expect = None
        try:
            self.store.move_ticket(tid, to, actor=ACTOR, reason=reason, expect=expect)
            return True
        except lifecycle.InvalidTransition as e:
            self.store.append("dispatch.move_refused", tid, {"to": to, "reason": reason, "error": str(e)})
            return False


class EffectApplier:
    """Carries out the pure core's effects (healer/core/fleet.py `Effect`), in order."""

    def __init__(self, store: Store, policy: Policy) -> None:
        self.store = store
        self.policy = policy

    def apply(self, effects: Iterable[Effect]) -> None:
        for e in effects:
            if e.op == "set":
                self.store.set_setting(e.key, e.value, event=e.event)
            elif e.op == "event":
                self.store.append(e.key, e.value, e.payload)
            elif e.op == "notify":
                notify(self.store, self.policy, e.key, e.value, severity=e.severity, evidence=e.payload)


class MainRef:
    """Where main is: the local branch, or (several hosts, `fleet.shared_remote`) the shared main, fetched now.
    The merger judges main there and the launcher starts worktrees from it."""

    def __init__(self, store: Store, root: Path, branch: str, shared: str | None) -> None:
        self.store = store
        self.root = root
        self.branch = branch
        self.shared = shared

    def __call__(self) -> str:
        if not self.shared:
            return self.branch
        try:
            shared_main.fetch(self.root, self.branch, self.shared)
        except git.GitError as e:  # the shared repository is unreachable: work from what was fetched last
            self.store.append("dispatch.fetch_failed", "", {"remote": self.shared, "error": str(e)[-300:]})
        return shared_main.main_ref(self.branch, self.shared)
