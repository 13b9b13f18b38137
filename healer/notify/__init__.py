"""Notifications: `notify(...)` is the one entry point; a cooldown per key bounds the noise.

(First version: log + JSONL. The supervisor work extends it with webhook and command
notifiers; keep this signature.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loguru import logger


def notify(store, policy, key: str, text: str, *, severity: str = "warning", evidence: dict[str, Any] | None = None,
           cooldown: float | None = None) -> bool:
    """Send `text` to every configured notifier unless `key` notified within the cooldown.

    Returns True when sent. Every call is recorded in the event log (`notify.sent` or
    `notify.suppressed`), so checkers can count notifications per key.
    """
    window = policy.sentinels.cooldown if cooldown is None else cooldown
    if not store.cooldown_pass(key, window):
        store.append("notify.suppressed", key, {"severity": severity})
        return False
    store.append("notify.sent", key, {"text": text, "severity": severity, "evidence": evidence or {}})
    for n in policy.notify.notifiers:
        if n.kind == "log":
            logger.warning("[{}] {}", key, text)
        elif n.kind == "jsonl" and n.path:
            p = Path(n.path)
            if not p.is_absolute():
                p = Path(store.root) / p
            p.parent.mkdir(parents=True, exist_ok=True)
            with p.open("a") as f:
                f.write(json.dumps({"at": store.now(), "key": key, "severity": severity, "text": text,
                                    "evidence": evidence or {}}, default=str) + "\n")
    return True
