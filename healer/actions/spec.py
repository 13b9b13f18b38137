"""ActionSpec: everything healer knows about one remediation action, in one record (issue 35).

The policy's whitelist, the rules' lease and applicability tables, the planner's dispatch, the
executor's handlers and the repair agent's MCP tools are all read from the registry below, so a
new action is one spec (a file in healer/actions/, or `register()` for a plugin or a test).

This module is pure (the core imports it): the planning function is a pure function of a `Step`;
check / apply / verify are the shell's (healer/remedy/handlers/), named by `handler` as a `Handler` or as
"module:NAME" that only the executor (healer/remedy/actions.py) resolves, so the registry never imports the shell.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time these load with the core (see Step.action)
    from healer.core.model import Finding, PlannedAction, Snapshot

LEASES = ("ticket", "subject", None)  # see healer/core/rules.py: LEASE


class UnknownAction(ValueError):
    """An action name no spec registers: a bug or a typo, never something to skip quietly."""

    def __init__(self, name: object, why: str | None = None) -> None:
        if why:
            super().__init__(f"remediation action {name!r}: {why}")
        else:
            super().__init__(f"unknown remediation action {name!r}; the known ones are {', '.join(names())}")


# -- what planning is given (pure) ----------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """One step of a rule, for one finding: what a spec's `plan` turns into planned actions."""

    name: str  # the action asked for
    finding: Finding
    rule: str | None  # the rule's id
    do: tuple[str, ...]  # the whole sequence of the rule (a step may defer to another of it)
    snapshot: Snapshot
    why: str  # why the rule acts ("rule X", or why it escalates)

    @property
    def evidence(self) -> dict[str, Any]:
        return self.finding.evidence

    @property
    def ticket(self) -> str | None:
        return self.finding.evidence.get("ticket")

    def action(self, subject: str, name: str | None = None, /, **params: Any) -> PlannedAction:
        """A planned action for this finding (another action than the step's own when `name` says so)."""
        # imported here, not at the top: the policy validates names with this registry, and importing
        # healer.core.model at the top would run healer/core/__init__ (the planner, the rules, the policy) mid-import
        from healer.core.model import PlannedAction  # lazy: core/__init__ mid-import is a run-time circle; 240 ms of pydantic

        params.setdefault("why", f"{self.finding.key} (rule {self.rule})")
        return PlannedAction(name or self.name, subject, params, reason=self.finding.key, rule=self.rule)


Plan = Callable[[Step], "list[PlannedAction]"]


# -- what the shell runs ---------------------------------------------------------------------------

class Refuse(Exception):
    """The action is not taken at all: nothing is journaled."""


class Abort(Exception):
    """The preconditions no longer hold on fresh state: the intent is aborted."""


@dataclass
class Target:
    """What an action acts on, resolved and validated (rebuilt identically on recovery)."""

    action: str
    subject: str
    params: dict[str, Any]
    ticket: str | None = None  # the ticket whose remediation lease this takes
    path: Any = None  # a pathlib.Path (the executor's confined path); no pathlib here: the core is pure
    agent: str | None = None
    paths: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Handler:
    """The shell's half of an action; `ctx` is healer.remedy.actions.Context."""

    resolve: Callable[[Any, str, dict], Target]  # raise Refuse
    check: Callable[[Any, Target], None]  # raise Abort
    apply: Callable[[Any, Target, int], dict]
    verify: Callable[[Any, Target], bool]


# -- what the repair agent is offered ----------------------------------------------------------------

@dataclass(frozen=True)
class Param:
    """One string argument of a tool besides its subjects. `reason` is the call's why; the others go
    to the action as params."""

    name: str
    description: str = ""
    required: bool = False
    pattern: str | None = None  # a full-match regular expression the server screens the value with


REASON = Param("reason", "why, in one line (journaled)")


@dataclass(frozen=True)
class Tool:
    """The action as an MCP tool of `healer mcp serve` (tools take a list of subjects)."""

    description: str
    subjects: str = "ticket_ids"  # the list argument: ticket_ids (screened as ids) or paths (confined to the fleet)
    params: tuple[Param, ...] = (REASON,)
    requires_finding: str | None = None  # the agent may act only on subjects the core finds with this kind now
    unfound: str = "{subject}: no {kind} finding for it now; {action} acts only on what the supervisor finds"
    # the built-in repair agent (healer/repair/builtin.py) answers these finding kinds with this tool, in `rank` order
    # across tools (lower first: close zombies before requeueing anything, labels before unblocking, files before worktrees)
    fixes: frozenset[str] = frozenset()
    rank: int = 50
    hint: str = ""  # the repair agent's prompt: when to use it, in a few words (healer/repair/launcher.py)


# -- the record ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ActionSpec:
    name: str
    summary: str  # one line: what it does (docs, `--help`, errors)
    lease: str | None  # "ticket", "subject" or None (healer/core/rules.py: LEASE)
    answers: frozenset[str]  # the finding kinds a rule may answer with it (rules.APPLICABLE)
    plan: Plan | None  # pure: a rule's step -> planned actions; None: never planned from a finding by itself
    handler: Handler | str  # check / apply / verify: a Handler, or "module:NAME" of one in the shell
    rate_limit: tuple[int, str] = (100, "1h")  # the policy's default remediation.rate_limits entry (count, per)
    tool: Tool | None = None  # offered to the repair agent when set

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or not self.name.islower():
            raise ValueError(f"action name {self.name!r}: expected snake_case (it is a policy word and a tool name)")
        if self.lease not in LEASES:
            raise ValueError(f"{self.name}: lease {self.lease!r}, expected one of {LEASES}")
        if self.tool is not None and self.tool.subjects not in ("ticket_ids", "paths"):
            raise ValueError(f"{self.name}: tool subjects {self.tool.subjects!r}, expected ticket_ids or paths")
        object.__setattr__(self, "answers", frozenset(self.answers))
        if self.tool is not None:
            object.__setattr__(self.tool, "fixes", frozenset(self.tool.fixes))


# -- the registry ----------------------------------------------------------------------------------

_REGISTRY: dict[str, ActionSpec] = {}  # in registration order: the whitelist's order


def register(spec: ActionSpec) -> ActionSpec:
    if spec.name in _REGISTRY:
        raise ValueError(f"action {spec.name!r} is registered twice")
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


@contextmanager
def registered(*specs: ActionSpec) -> Iterator[None]:
    """Specs registered for the duration of a with-block (plugins under test, toy actions)."""
    for s in specs:
        register(s)
    try:
        yield
    finally:
        for s in specs:
            unregister(s.name)


def get(name: str) -> ActionSpec:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownAction(name) from None


def tool(name: str) -> Tool:
    """The repair-agent tool of action `name` (UnknownAction when no such action is a tool)."""
    t = get(name).tool
    if t is None:
        raise UnknownAction(name)
    return t


def specs() -> tuple[ActionSpec, ...]:
    return tuple(_REGISTRY.values())


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


class Names(Sequence[str]):
    """A live view of the registered names that satisfy `keep`: what a module-level constant would be if
    it could see actions registered after import (ACTIONS, TICKET_LEASE...)."""

    def __init__(self, keep: Callable[[ActionSpec], bool] = lambda s: True) -> None:
        self._keep = keep

    def _now(self) -> tuple[str, ...]:
        return tuple(s.name for s in _REGISTRY.values() if self._keep(s))

    def __getitem__(self, i):
        return self._now()[i]

    def __len__(self) -> int:
        return len(self._now())

    def __contains__(self, x: object) -> bool:
        s = _REGISTRY.get(x) if isinstance(x, str) else None
        return s is not None and self._keep(s)

    def __iter__(self) -> Iterator[str]:
        return iter(self._now())

    def __repr__(self) -> str:
        return f"Names{self._now()!r}"


class ByFinding(Mapping[str, frozenset[str]]):
    """finding kind -> the registered actions that answer it (live), over a fixed set of kinds."""

    def __init__(self, kinds: Sequence[str]) -> None:
        self._kinds = tuple(kinds)

    def __getitem__(self, kind: str) -> frozenset[str]:
        if kind not in self._kinds:
            raise KeyError(kind)
        return frozenset(s.name for s in _REGISTRY.values() if kind in s.answers)

    def __iter__(self) -> Iterator[str]:
        return iter(self._kinds)

    def __len__(self) -> int:
        return len(self._kinds)


class Leases(Mapping[str, "str | None"]):
    """action -> its lease scope (live)."""

    def __getitem__(self, name: str) -> str | None:
        if name not in _REGISTRY:
            raise KeyError(name)
        return _REGISTRY[name].lease

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(_REGISTRY))

    def __len__(self) -> int:
        return len(_REGISTRY)
