"""resume_dispatch: lift the healer's own dispatch pause. Planned by the core when main is green again
(healer/core/plan.py), never as a rule's step."""

from healer.actions.spec import ActionSpec

SPEC = ActionSpec(
    name="resume_dispatch",
    summary="lift the healer's own dispatch pause",
    lease=None,
    answers=frozenset(),
    plan=None,
    handler="healer.remedy.handlers.fleet:RESUME_DISPATCH",
)
