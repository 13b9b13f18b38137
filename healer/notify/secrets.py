"""The notifiers' secrets (`secret_env`), kept by the process that signs with them and by no child of it.

A variable in healer's environment reaches every program healer starts: the loops the dispatcher
launches, their agents and gates, a repair agent. `hold(policy)` moves each notifier's secret out of
`os.environ` (the process keeps it here) before anything is started, so no child inherits it; `get` is
how a notifier reads it. The environment block the process was started with still holds the value in
its memory (`/proc/PID/environ`): healer's long-running commands are made non-dumpable at start
(healer/launch.py), so a process of the same user without CAP_SYS_PTRACE (a sandboxed agent drops
every capability) cannot read that file.
"""

from __future__ import annotations

import os

_held: dict[str, str] = {}


def hold(policy) -> None:
    for n in policy.notify.notifiers:
        name = getattr(n, "secret_env", None)
        if name and name in os.environ:
            _held[name] = os.environ.pop(name)


def get(name: str | None) -> str | None:
    if not name:
        return None
    return os.environ.get(name) or _held.get(name)
