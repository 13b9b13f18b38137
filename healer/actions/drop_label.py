"""drop_label: remove a stale label (e.g. a `to-review` nobody answered), one action per label."""

from healer.actions.spec import ActionSpec, Param, Step, Tool


def plan(s: Step):
    if not s.ticket:
        return []
    if s.finding.kind == "wait_cycle" and s.evidence.get("break_action") != s.name:
        return []  # a wait cycle is broken by one action only: the one its finding names
    return [s.action(s.ticket, ticket=s.ticket, label=lb, added_at=at) for lb, at in sorted((s.evidence.get("labels") or {}).items())]


SPEC = ActionSpec(
    name="drop_label",
    summary="remove a stale label from a ticket",
    lease="ticket",
    answers=frozenset({"stale_label", "wait_cycle"}),
    plan=plan,
    handler="healer.remedy.handlers.tickets:DROP_LABEL",
    tool=Tool("Remove `label` from each ticket in the list (e.g. a stale 'to-review'). Each id is checked and journaled "
              "separately.",
              params=(Param("label", "the label to remove", required=True, pattern=r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}"),),
              fixes=frozenset({"stale_label"}), rank=30, hint="stale labels"),
)
