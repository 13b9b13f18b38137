"""The real Alertmanager and Prometheus (Debian's packages) on 127.0.0.1 ports, in a tmp dir, for tests.

Missing binaries skip locally and fail under CI=true (.ci/run installs them). Each server is started
with short intervals (group_wait/group_interval 1 s, scrape_interval 1 s) and stopped by pid.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
PROMETHEUS = "/usr/bin/prometheus"


def need(binary: str) -> str:
    path = binary if os.access(binary, os.X_OK) else shutil.which(Path(binary).name)
    if path:
        return path
    msg = f"{binary} is not installed (apt-get install prometheus prometheus-alertmanager)"
    if os.environ.get("CI") == "true":
        pytest.fail(msg)
    pytest.skip(reason=msg)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - 127.0.0.1 in a test
        raw = r.read()
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode()


class Server:
    """One child process, its log, and readiness by HTTP (`ready` path)."""

    def __init__(self, argv: list[str], base: str, ready: str, log: Path) -> None:
        self.base = base
        self.log = log
        self._out = log.open("wb")
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=subprocess.STDOUT, cwd=log.parent)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"{argv[0]} exited {self.proc.returncode}: {self.tail()}")
            try:
                get(base + ready, timeout=1)
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(f"{argv[0]} not ready in 60 s: {self.tail()}") from None
                time.sleep(0.1)

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._out.close()


def alertmanager(tmp: Path, hook_url: str) -> Server:
    """Alertmanager routing every alert to `hook_url` (resolves too), grouped by alertname, 1 s group timers."""
    binary = need(ALERTMANAGER)
    d = tmp / "alertmanager"
    d.mkdir()
    (d / "am.yml").write_text(f"""\
route:
  receiver: hook
  group_by: [alertname]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: {hook_url}
        send_resolved: true
""")
    for _ in range(3):  # a port another process took between free_port and the bind: try another
        port = free_port()
        try:
            return Server([binary, f"--config.file={d / 'am.yml'}", f"--storage.path={d / 'data'}",
                           f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=warn"],
                          f"http://127.0.0.1:{port}", "/-/ready", d / "am.log")
        except AssertionError:
            last = (d / "am.log").read_text(errors="replace") if (d / "am.log").exists() else ""
            if "address already in use" not in last:
                raise
    raise AssertionError("alertmanager: no free port in 3 tries")


def prometheus(tmp: Path, target: str) -> Server:
    """Prometheus scraping `target` (host:port) every second as job `healer`."""
    binary = need(PROMETHEUS)
    d = tmp / "prometheus"
    d.mkdir()
    (d / "prom.yml").write_text(f"""\
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: healer
    static_configs:
      - targets: ['{target}']
""")
    for _ in range(3):
        port = free_port()
        try:
            return Server([binary, f"--config.file={d / 'prom.yml'}", f"--storage.tsdb.path={d / 'data'}",
                           f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                          f"http://127.0.0.1:{port}", "/-/ready", d / "prom.log")
        except AssertionError:
            last = (d / "prom.log").read_text(errors="replace") if (d / "prom.log").exists() else ""
            if "address already in use" not in last:
                raise
    raise AssertionError("prometheus: no free port in 3 tries")
