"""Webhook notifier: one POST of JSON (Slack-compatible `text`, or Alertmanager's webhook payload) per try;
the alertmanager notifier posts through `send` too.

Retries, backoff and the idempotency key belong to the outbox (healer.notify.outbox).

The secret comes from an environment variable named by the policy (`secret_env`) and
travels only in the `Authorization` header. It is never logged, never written to an
event or a file, and scrubbed from every error message; the URL itself is reported
as scheme://host only (Slack-style URLs carry a token in their path).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from healer.clock import iso
from healer.notify import alertmanager, secrets


class WebhookError(Exception):
    pass


def safe_url(url: str) -> str:
    u = urlsplit(url)
    return f"{u.scheme}://{u.hostname or ''}{f':{u.port}' if u.port else ''}"


def scrub(text: str, *secrets: str | None) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return text


def body(payload: dict, idem: str, fmt: str = "healer", url: str | None = None):
    """The JSON a receiver gets. `healer`: Slack-compatible `text` plus key, severity, evidence.
    `alertmanager_webhook`: the payload Alertmanager sends its webhook receivers (version 4), for bridges that take
    it. `alertmanager` (the name before 0.34) means `alertmanager_webhook`, except toward Alertmanager's own API
    (a URL ending in /api/v2/alerts, which always answered that payload 400): there it is the PostableAlert list."""
    if fmt == "alertmanager" and url and alertmanager.is_api(url):
        return alertmanager.alerts(payload)
    if fmt in ("alertmanager", "alertmanager_webhook"):
        labels = {"alertname": payload["key"].split(":", 1)[0], "key": payload["key"], "severity": payload["severity"],
                  "source": "healer"}
        status = "resolved" if payload.get("resolved") else "firing"
        alert = {"status": status, "labels": labels,
                 "annotations": {"summary": payload["text"],
                                 "description": json.dumps(payload.get("evidence") or {}, sort_keys=True, default=str)},
                 "startsAt": iso(payload["at"]).replace("+00:00", "Z"),
                 "endsAt": iso(payload["ends_at"]).replace("+00:00", "Z") if payload.get("resolved") else "0001-01-01T00:00:00Z",
                 "generatorURL": "", "fingerprint": idem[:16]}
        return {"version": "4", "groupKey": f"healer:{payload['key']}", "truncatedAlerts": 0, "status": status,
                "receiver": "healer", "groupLabels": {"alertname": labels["alertname"]}, "commonLabels": labels,
                "commonAnnotations": alert["annotations"], "externalURL": "", "alerts": [alert],
                "idempotency_key": idem}
    return {"text": f"[{payload['severity']}] {payload['text']}", "key": payload["key"], "severity": payload["severity"],
            "evidence": payload.get("evidence") or {}, "at": payload.get("at"), "idempotency_key": idem}


class Rejected(WebhookError):
    """The receiver refused this message (a 4xx other than 408/429): retrying cannot help."""


def send(url: str, data: dict | list, *, secret_env: str | None, timeout: float, idem: str | None = None) -> None:
    """One POST with a deadline; returns on a 2xx. Raises Rejected or WebhookError (secret-free)."""
    secret = secrets.get(secret_env)
    raw = json.dumps(data, default=str).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "healer"}
    if idem:
        headers["Idempotency-Key"] = idem
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    req = urllib.request.Request(url, data=raw, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - the operator's URL
            resp.read()
            return
    except urllib.error.HTTPError as e:
        msg = scrub(f"webhook {safe_url(url)}: HTTP {e.code}", secret, url)
        if 400 <= e.code < 500 and e.code not in (408, 429):
            raise Rejected(msg) from None
        raise WebhookError(msg) from None
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        raise WebhookError(scrub(f"webhook {safe_url(url)}: {type(e).__name__}: {getattr(e, 'reason', e)}",
                                 secret, url)) from None
