"""pause_dispatch: stop launching new agents (main is red); lifted by resume_dispatch once main is green."""

from healer.actions.spec import ActionSpec, Step


def plan(s: Step):
    if s.snapshot.dispatch_paused:
        return []
    return [s.action("dispatch", by="healer", why=s.finding.key)]


SPEC = ActionSpec(
    name="pause_dispatch",
    summary="stop launching new agents",
    lease=None,
    answers=frozenset({"main_red"}),
    plan=plan,
    handler="healer.remedy.handlers.fleet:PAUSE_DISPATCH",
)
