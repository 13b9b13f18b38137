"""Alertmanager notifier: healer's alerts as PostableAlerts on Alertmanager's v2 API (`POST /api/v2/alerts`).

The body is a JSON list of `{labels, annotations, startsAt, endsAt, generatorURL}`. Labels route
(`alertname` is the finding kind, plus `key`, `subject`, `severity`, `source="healer"` and the
notifier's own `labels`); annotations carry the evidence (`summary`, `description` as JSON, and
each scalar evidence field as `evidence_NAME`).

Alertmanager ends an alert at its `endsAt`. A firing alert is posted with an `endsAt` of its time
plus `hold` (twice its cooldown window, at least an hour): healer posts it again when the window
ends if the condition still holds, so Alertmanager keeps it firing, and an alert whose healer died
ends on its own. When the condition clears, the supervisor owes a resolve: the same labels with
`endsAt` = the moment it saw it clear (healer.notify.resolve_cleared).
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

from healer.clock import iso

PATH = "/api/v2/alerts"
MIN_HOLD = 3600.0
_NAME = re.compile(r"[^A-Za-z0-9_]")


def endpoint(url: str) -> str:
    """The alerts endpoint of an Alertmanager given by its base URL (or by the endpoint itself)."""
    return url if is_api(url) else url.rstrip("/") + PATH


def is_api(url: str) -> bool:
    return urlsplit(url).path.rstrip("/").endswith(PATH)


def hold(window: float) -> float:
    """How long a firing alert lasts in Alertmanager without a repost: two cooldown windows, at least an hour."""
    return max(MIN_HOLD, 2.0 * float(window or 0))


def _ts(t: float) -> str:
    return iso(float(t)).replace("+00:00", "Z")


def _scalar(v) -> str | None:
    if isinstance(v, bool | int | float | str) and str(v) != "":
        return str(v)
    return None


def alerts(payload: dict, labels: dict[str, str] | None = None, generator_url: str | None = None) -> list[dict]:
    """The PostableAlert list for one owed row (`payload` as the outbox stores it)."""
    key = str(payload["key"])
    kind, _, subject = key.partition(":")
    own = {"alertname": kind, "key": key, "subject": subject, "severity": str(payload.get("severity") or "warning"),
           "source": "healer"}
    lab = {k: str(v) for k, v in (labels or {}).items() if str(v) != ""}
    lab.update({k: v for k, v in own.items() if v != ""})  # healer's labels win: they are its alert's identity
    evidence = payload.get("evidence") or {}
    ann = {"summary": str(payload.get("text") or key),
           "description": json.dumps(evidence, sort_keys=True, default=str)[:8000]}
    for k, v in evidence.items():
        s = _scalar(v)
        if s is not None:
            ann[f"evidence_{_NAME.sub('_', str(k))}"] = s[:1000]
    at = float(payload["at"])
    ends = payload["ends_at"] if payload.get("resolved") else at + float(payload.get("hold") or MIN_HOLD)
    alert = {"labels": lab, "annotations": ann, "startsAt": _ts(at), "endsAt": _ts(max(float(ends), at))}
    if generator_url:
        alert["generatorURL"] = generator_url
    return [alert]


def takes_resolves(n) -> bool:
    """Notifiers that are told when a condition clears: Alertmanager's API, whichever way it was configured."""
    return n.kind == "alertmanager" or (n.kind == "webhook" and n.format == "alertmanager" and bool(n.url) and is_api(n.url))
