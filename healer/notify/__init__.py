"""Notifications: `notify(...)` / `notify_all(...)` decide; the outbox delivers.

Deciding is cheap and never waits on a receiver: the pure core (`healer.core.notices.admit`)
lets one alert per key through per cooldown window (and none while an earlier one is still
owed); the store then atomically starts the window, records `notify.sent` and owes one outbox
row per remote notifier. Local notifiers (`log`, `jsonl`) are written at once. Remote ones
(`webhook`, `command`) are delivered by `healer.notify.outbox.Courier`, a worker thread that
`healer up` and `healer supervise` start: per-notifier timeouts, backoff with jitter, an
idempotency key (header `Idempotency-Key` and payload field `idempotency_key`), and a failed
delivery stays pending (`notify.failed` per try) until `notify.delivered` or `notify.expired`.
Cooldowns count delivered notifications: a window whose only notification expired undelivered
is released, so the next firing notifies again.

Secrets never reach the store: a row names its notifier by a fingerprint of its settings,
the webhook secret stays in its environment variable, the URL is shown as scheme://host.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from loguru import logger

from healer.core import notices  # notices.admit, looked up per call: a game day's mutant swaps it (tests/chaos/test_mutations.py)
from healer.notify import secrets
from healer.notify.alertmanager import hold, takes_resolves
from healer.notify.identity import REMOTE, fingerprint  # noqa: E402,F401 - the outbox reads them there too
from healer.notify.outbox import wake
from healer.notify.webhook import safe_url
from healer.policy.schema import FINDINGS

OPEN = "notify.open:"  # setting per alert key told to a notifier that takes resolves, until it is resolved
RESOLVED = "resolved:"  # the outbox key of a resolve (its own cooldown row: a resolve never holds a firing back)


class _Alert:
    __slots__ = ("key", "text", "severity", "evidence", "cooldown")

    def __init__(self, key: str, text: str, severity: str = "warning", evidence: dict[str, Any] | None = None,
                 cooldown: float | None = None) -> None:
        self.key, self.text, self.severity, self.evidence, self.cooldown = key, text, severity, evidence or {}, cooldown


def idempotency_key(key: str, now: float) -> str:
    """One per notification (a key notifies at most once per instant: cooldown). Derived, not random, so a
    simulated game day replays to the same event log wherever it runs."""
    return hashlib.sha256(f"healer\0{key}\0{now!r}".encode()).hexdigest()[:32]


def describe(n) -> str:
    if n.kind == "webhook":
        return f"webhook {safe_url(n.url)}"
    if n.kind == "command":
        return f"command {n.command[0]}"
    if n.kind == "alertmanager":
        return f"alertmanager {safe_url(n.url)}"
    return n.kind


def _local(store, n, key: str, text: str, severity: str, evidence: dict[str, Any], idem: str) -> None:
    if n.kind == "log":
        logger.warning("[{}] {}", key, text)
    elif n.kind == "jsonl":
        p = Path(n.path)
        if not p.is_absolute():
            p = Path(store.root) / p
        p.parent.mkdir(parents=True, exist_ok=True)
        with p.open("a") as f:
            f.write(json.dumps({"at": store.now(), "key": key, "severity": severity, "text": text,
                                "evidence": evidence, "idempotency_key": idem}, default=str) + "\n")


def _scrubbed(n, e: Exception) -> str:
    reason = str(e)
    secret = secrets.get(getattr(n, "secret_env", None))
    return reason.replace(secret, "***") if secret else reason


def notify_all(store, policy, alerts, *, cooldown: float | None = None) -> int:
    """Notify each alert (`.key`, `.text`, `.severity`, `.evidence`) that passes its cooldown; returns how many."""
    alerts = list(alerts)
    if not alerts:
        return 0
    window = policy.sentinels.cooldown if cooldown is None else cooldown
    keys = {a.key for a in alerts}
    pending = {it.key for it in store.outbox(["pending"]) if it.key in keys}
    last = {k: v[0] for k, v in store.cooldowns().items() if k in keys}
    now = store.now()
    adm = notices.admit(alerts, last, pending, window, now)
    notifiers = list(policy.notify.notifiers)
    remote = [n for n in notifiers if n.kind in REMOTE]

    resolving = any(takes_resolves(n) for n in remote)
    expires = now + policy.notify.expire
    sent = 0
    suppressed = dict(adm.suppressed)
    for a in adm.send:
        idem = idempotency_key(a.key, now)
        evidence = dict(a.evidence or {})
        base = {"key": a.key, "text": a.text, "severity": a.severity, "evidence": evidence, "at": now,
                "local": any(n.kind not in REMOTE for n in notifiers)}
        w = window if getattr(a, "cooldown", None) is None else a.cooldown
        base["hold"] = hold(w)
        rows = [(fingerprint(n), {**base, "notifier": describe(n)}) for n in remote]
        if not store.enqueue_notification(a.key, w, idem, rows, expires,
                                          {"text": a.text, "severity": a.severity, "evidence": evidence,
                                           "local": [n.kind for n in notifiers if n.kind not in REMOTE],
                                           "owed": [r[1]["notifier"] for r in rows]}):
            suppressed[a.key] = suppressed.get(a.key, 0) + 1  # another process notified it first
            continue
        sent += 1
        if resolving:  # the supervisor resolves it when its condition clears (resolve_cleared)
            store.set_setting(OPEN + a.key, {"at": now, "text": a.text, "severity": a.severity, "evidence": evidence,
                                             "hold": base["hold"]})
        for n in notifiers:
            if n.kind in REMOTE:
                continue
            try:
                _local(store, n, a.key, a.text, a.severity, evidence, idem)
            except Exception as e:  # noqa: BLE001 - one broken notifier must not silence the others or the tick
                store.append("notify.failed", a.key, {"notifier": describe(n), "reason": _scrubbed(n, e), "idem": idem})
                logger.error("notifier {} failed for {}: {}", describe(n), a.key, e)
    if suppressed:
        sev = {a.key: a.severity for a in alerts}
        for k, count in suppressed.items():
            store.append("notify.suppressed", k, {"severity": sev.get(k), **({"count": count} if count > 1 else {}),
                                                  **({"owed": True} if k in adm.owed else {})})
    if sent and remote:
        wake()
    return sent


def notify(store, policy, key: str, text: str, *, severity: str = "warning", evidence: dict[str, Any] | None = None,
           cooldown: float | None = None, clock=None) -> bool:
    """Notify `text` under `key` unless `key` notified within the cooldown (or is still owed); True when notified.

    Never waits on a receiver: remote notifiers get it from the outbox worker. `clock` is accepted for
    compatibility (the worker paces retries)."""
    return notify_all(store, policy, [_Alert(key, text, severity, evidence, cooldown)], cooldown=cooldown) == 1


def open_alerts(store, policy) -> dict[str, dict]:
    """Alert keys told to a notifier that takes resolves and not yet resolved: key -> what was told."""
    if not any(takes_resolves(n) for n in policy.notify.notifiers):
        return {}
    keys = [k for k in store.cooldowns() if not k.startswith(RESOLVED)]
    got = store.get_settings([OPEN + k for k in keys]) if keys else {}
    return {k[len(OPEN):]: v for k, v in got.items() if isinstance(v, dict)}


def resolve(store, policy, key: str, told: dict, text: str = "") -> bool:
    """Owe one resolve (`endsAt` = now) of `key` to each notifier that takes resolves; forget the open alert."""
    now = store.now()
    targets = [n for n in policy.notify.notifiers if n.kind in REMOTE and takes_resolves(n)]
    idem = idempotency_key(RESOLVED + key, now)
    payload = {"key": key, "text": told.get("text") or key, "severity": told.get("severity") or "warning",
               "evidence": told.get("evidence") or {}, "at": told.get("at", now), "ends_at": now, "resolved": True,
               "local": True}  # a lost resolve must not release anything: the alert ends at its hold anyway
    rows = [(fingerprint(n), {**payload, "notifier": describe(n)}) for n in targets]
    if rows and not store.enqueue_notification(RESOLVED + key, 0.0, idem, rows, now + policy.notify.expire,
                                               {"text": text or f"{key} cleared", "severity": "info", "resolved": key,
                                                "owed": [r[1]["notifier"] for r in rows]}):
        return False  # an earlier resolve of the key is still owed: try again next tick
    store.set_setting(OPEN + key, None)
    store.append("notify.resolved", key, {"since": told.get("at"), "at": now, "owed": [r[1]["notifier"] for r in rows]})
    if rows:
        wake()
    return True


def resolve_cleared(store, policy, findings, *, main_green: bool, failed_sources=()) -> list[str]:
    """The supervisor's part: resolve every open alert whose condition this tick saw clear; returns their keys.

    Nothing is judged clear while a snapshot source failed (a finding missing for want of data is no all-clear)."""
    if failed_sources:
        return []
    opened = open_alerts(store, policy)
    if not opened:
        return []

    firing = {f.key for f in findings if f.status != "unknown"}
    unknown = {f.key for f in findings if f.status == "unknown"}
    done = []
    for k in notices.cleared(opened, firing, unknown, FINDINGS, main_green=main_green):
        if resolve(store, policy, k, opened[k]):
            done.append(k)
    return done
