"""Notifications: `notify(...)` is the one entry point; a cooldown per key bounds the noise.

Notifiers (policy `notify.notifiers`): `log` (loguru), `jsonl` (one JSON object per
line in a file), `webhook` (POST JSON with a Slack-compatible `text`, retried with
exponential backoff, secret from an environment variable, never logged) and
`command` (argv, the notification as JSON on stdin, no shell).

A notifier that fails never breaks the caller: it is recorded as `notify.failed`
(notifier kind and a secret-free reason) and the others still run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from loguru import logger


def _payload(key: str, text: str, severity: str, evidence: dict[str, Any]) -> dict[str, Any]:
    return {"text": f"[{severity}] {text}", "key": key, "severity": severity, "evidence": evidence}


def _send(store, n, key: str, text: str, severity: str, evidence: dict[str, Any], clock) -> None:
    if n.kind == "log":
        logger.warning("[{}] {}", key, text)
    elif n.kind == "jsonl":
        p = Path(n.path)
        if not p.is_absolute():
            p = Path(store.root) / p
        p.parent.mkdir(parents=True, exist_ok=True)
        with p.open("a") as f:
            f.write(json.dumps({"at": store.now(), "key": key, "severity": severity, "text": text,
                                "evidence": evidence}, default=str) + "\n")
    elif n.kind == "webhook":
        from healer.notify import webhook

        webhook.send(n.url, _payload(key, text, severity, evidence), secret_env=n.secret_env, retries=n.retries,
                     timeout=n.timeout, clock=clock)
    elif n.kind == "command":
        from healer.notify import command

        command.send(n.command, _payload(key, text, severity, evidence), timeout=n.timeout, cwd=str(store.root))


def _describe(n) -> str:
    if n.kind == "webhook":
        from healer.notify.webhook import safe_url

        return f"webhook {safe_url(n.url)}"
    if n.kind == "command":
        return f"command {n.command[0]}"
    return n.kind


def notify(store, policy, key: str, text: str, *, severity: str = "warning", evidence: dict[str, Any] | None = None,
           cooldown: float | None = None, clock=None) -> bool:
    """Send `text` to every configured notifier unless `key` notified within the cooldown.

    Returns True when sent. Every call is recorded in the event log (`notify.sent` or
    `notify.suppressed`), so checkers can count notifications per key. `clock` (default:
    the store's) paces webhook retries.
    """
    window = policy.sentinels.cooldown if cooldown is None else cooldown
    if not store.cooldown_pass(key, window):
        store.append("notify.suppressed", key, {"severity": severity})
        return False
    evidence = evidence or {}
    store.append("notify.sent", key, {"text": text, "severity": severity, "evidence": evidence})
    clock = clock or store.clock
    for n in policy.notify.notifiers:
        try:
            _send(store, n, key, text, severity, evidence, clock)
        except Exception as e:  # noqa: BLE001 - one broken notifier must not silence the others or the tick
            reason = str(e)
            secret = os.environ.get(n.secret_env) if n.secret_env else None
            if secret:
                reason = reason.replace(secret, "***")
            store.append("notify.failed", key, {"notifier": _describe(n), "reason": reason})
            logger.error("notifier {} failed for {}: {}", _describe(n), key, reason)
    return True
