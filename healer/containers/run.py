"""How a program runs as a container's PID 1: under an init that forwards signals, and its exit code as a process's."""

from __future__ import annotations

import os


def signal_exit(code: int | None) -> int | None:
    """Docker reports death by signal N as 128+N; report it as -N like a process."""
    if code is not None and 128 < code <= 128 + 64:
        return -(code - 128)
    return code


def init_argv(argv) -> list[str]:
    """PID 1 of a container ignores every signal it has no handler for, so a plain agent
    would sit through SIGTERM until the SIGKILL. The host's tini (`docker-init`, shipped
    with docker.io) forwards signals to the agent's process group and reaps zombies; the
    daemon's own `--init` cannot be used because the image's /sbin lives on a read-only mount."""
    for tini in ("/usr/bin/docker-init", "/usr/bin/tini-static", "/usr/bin/tini"):
        if os.path.exists(tini):
            return [tini, "-g", "--", *argv]
    return list(argv)
