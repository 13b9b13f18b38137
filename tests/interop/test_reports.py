"""report.html opened in a real headless Chromium (Debian's); the pytest plugin writes reports and collects
any folder of scenarios it is pointed at."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO, healer

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def _need_chromium():
    if CHROMIUM is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed (.ci/run installs Debian's chromium)")
        pytest.skip(reason="Debian's chromium is not installed (apt-get install chromium)")


def _chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "chromium-profile"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=180)


@pytest.mark.long  # 14 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_html_report_renders_in_headless_chromium_without_console_errors(tmp_path):
    _need_chromium()
    out = tmp_path / "gd"
    r = healer("gameday", "run", "red-main", "--report", str(out), "--quiet", timeout=300)
    assert r.returncode == 0, r.stderr
    page = out / "report.html"
    text = page.read_text()
    assert page.stat().st_size <= 1_000_000  # one scenario: it was 4.8 MB with plotly's script inlined
    assert "<script" not in text and "http://" not in text and "https://" not in text  # self-contained: no script, no fetch
    assert "red-main" in text and "M-1" in text and "fault" in text and "healer action" in text
    # faults labelled by name, the red-main period and the dispatch pause as bands, a clock-time axis
    assert "⚡ red_main</text>" in text and "⚡ green_main</text>" in text
    assert ">main red</text>" in text and ">dispatch paused</text>" in text and "main red: +15m00s to +1h45m00s" in text
    assert "simulated clock (UTC) from 2023-11-14 22:13:20 UTC" in text
    assert ">22:43:20</text>" in text and ">+30m00s</text>" in text
    shot = tmp_path / "shot.png"
    r = _chromium(tmp_path, "--window-size=1400,1800", "--virtual-time-budget=5000", f"--screenshot={shot}", page.as_uri())
    assert shot.exists() and shot.stat().st_size > 20_000, r.stderr[-2000:]
    # console errors: Chromium logs them (level 2+) with --enable-logging=stderr --v=0 as "CONSOLE(...)" lines
    r = _chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--dump-dom", page.as_uri())
    console = [ln for ln in r.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert not console, console[:5]
    dom = r.stdout
    assert dom.count('<svg class="timeline"') == 1 and "⚡ red_main" in dom  # the browser read the swimlanes' SVG
    assert not any(tmp_path.glob("chromium-profile/Crash*/*"))


@pytest.mark.campaign  # a whole pytest session in a child: `make campaigns` (CI runs it)
def test_pytest_plugin_collects_any_folder_and_writes_the_report(tmp_path):
    folder = tmp_path / "my-gamedays"
    folder.mkdir()
    shutil.copy(REPO / "chaos" / "scenarios" / "red-main.yaml", folder / "red-main.yaml")
    out = tmp_path / "rep"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(folder),
                        "--gameday-report", str(out), "--rootdir", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert re.search(r"\b1 passed\b", r.stdout)
    assert {"journal.json", "report.md", "report.html"} <= {p.name for p in out.iterdir()}
