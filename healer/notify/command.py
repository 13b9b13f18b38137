"""Command notifier: run an argv (never a shell) with the notification as JSON on stdin
(its idempotency key also in $HEALER_IDEMPOTENCY_KEY)."""

from __future__ import annotations

import json
import os
import subprocess


class CommandError(Exception):
    pass


def send(argv: list[str], payload: dict | list, *, timeout: float, cwd: str, idem: str | None = None) -> None:
    env = {**os.environ, **({"HEALER_IDEMPOTENCY_KEY": idem} if idem else {})}
    try:
        r = subprocess.run(list(argv), input=json.dumps(payload, default=str), text=True, capture_output=True,
                           timeout=timeout, cwd=cwd, start_new_session=True, env=env)
    except FileNotFoundError as e:
        raise CommandError(f"notify command {argv[0]!r} not found") from e
    except subprocess.TimeoutExpired as e:
        raise CommandError(f"notify command {argv[0]!r} did not finish within {timeout:g}s") from e
    if r.returncode != 0:
        tail = (r.stderr or "").strip().splitlines()[-1:] or [""]
        raise CommandError(f"notify command {argv[0]!r} exited {r.returncode}: {tail[0][:200]}")
