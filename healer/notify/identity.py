"""Which notifiers deliver through the outbox, and a notifier's identity there: read by the deciding side
(healer/notify/__init__.py) and by the courier (healer/notify/outbox.py), so neither imports the other for it."""

from __future__ import annotations

import hashlib
import json

REMOTE = ("webhook", "command", "alertmanager")


def fingerprint(n) -> str:
    """A notifier's identity in the outbox: its kind and a hash of its settings (never the URL or a secret)."""
    raw = json.dumps(n.model_dump(mode="json", exclude={"retries"}), sort_keys=True)
    return f"{n.kind}:{hashlib.sha256(raw.encode()).hexdigest()[:16]}"
