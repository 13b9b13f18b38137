"""ack_page: acknowledge a page (an alert key notified): `notify.acked` with who, and the alert resolved at every
notifier that takes resolves (Alertmanager). An operator's step (the console), never a rule's."""

from healer.actions.spec import ActionSpec

SPEC = ActionSpec(
    name="ack_page",
    summary="acknowledge a page: record who took it, resolve it where notifiers take resolves",
    lease=None,  # touches no ticket, file or agent
    answers=frozenset(),
    plan=None,
    handler="healer.remedy.handlers.operator:ACK_PAGE",
)
