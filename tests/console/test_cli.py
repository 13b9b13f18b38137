"""`healer console` as a process: one line with the URL that answers, the fleet's pages, SIGTERM exit 0, Ctrl-C 4."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request

import pytest

from healer.console import security
from tests.conftest import make_repo


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 0), (signal.SIGINT, 4)], ids=["sigterm", "ctrl-c"])
def test_console_prints_its_url_on_one_line_serves_the_fleet_and_stops_cleanly(tmp_path, sig, code):
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir()
    env = {k: v for k, v in os.environ.items() if k != security.TOKEN_ENV}
    p = subprocess.Popen([sys.executable, "-m", "healer", "console", "-C", str(root), "--operator", "zed"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = p.stdout.readline().strip()  # type: ignore[union-attr]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/"), url
        with urllib.request.urlopen(url, timeout=30) as r:
            page = r.read().decode()
        assert "operator zed" in page and 'data-state="queued"' in page
        assert r.headers["Content-Security-Policy"].startswith("default-src 'none'")
    finally:
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
    assert p.returncode == code, err
    assert out == ""  # the URL was the one line
