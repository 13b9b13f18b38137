"""Webhook notifier: POST JSON (Slack-compatible `text`) with retries and exponential backoff.

The secret comes from an environment variable named by the policy (`secret_env`) and
travels only in the `Authorization` header. It is never logged, never written to an
event or a file, and scrubbed from every error message; the URL itself is reported
as scheme://host only (Slack-style URLs carry a token in their path).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from healer.clock import Clock

BASE_DELAY = 0.5  # seconds; doubles after each failed try


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


def send(url: str, payload: dict, *, secret_env: str | None, retries: int, timeout: float, clock: Clock) -> int:
    """POST until a 2xx; returns the number of tries. Raises WebhookError (secret-free) when it gives up."""
    secret = os.environ.get(secret_env) if secret_env else None
    body = json.dumps(payload, default=str).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "healer"}
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    last = ""
    delay = BASE_DELAY
    for attempt in range(1, retries + 2):
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - the operator's URL
                resp.read()
                return attempt
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code}"
            if 400 <= e.code < 500 and e.code not in (408, 429):
                break  # the receiver rejects this message: retrying cannot help
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
        if attempt <= retries:
            clock.sleep(delay)
            delay *= 2
    raise WebhookError(scrub(f"webhook {safe_url(url)} failed after {attempt} tries: {last}", secret, url))
