"""A Docker client that has answered, or one clear line saying why not: what the container runtime and the image
builder (healer/containers/images.py) both open, so neither imports the other for it."""

from __future__ import annotations

import os

from healer.errors import Unavailable


def connect(timeout: float = 30):
    """A docker client that has answered a ping, or one clear line saying why not."""
    import docker  # lazy: the docker SDK, ~55 ms of `healer gameday list` (chaos.faults.containers imports this module)
    import docker.errors  # lazy: with docker above (0 ms more)
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
        return client
    except docker.errors.DockerException as e:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise Unavailable(f"container runtime: no Docker engine answers at {host}; start dockerd "
                          f"(e.g. dockerd --bridge=none --iptables=false) ({type(e).__name__})") from e
