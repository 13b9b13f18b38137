"""Spend as Prometheus metrics (issue 43): `healer_spend_usd_total{cli}` over the whole event log,
`healer_spend_day_usd{day}` for the last 7 days, `healer_ticket_spend_usd{ticket}` for the 10 tickets that spent most
(ticket ids are no bounded label set). The dispatcher's metrics: `up` and `dispatch` export them, `supervise` not,
so a sum over the fleet's daemons never counts a dollar twice. Scraped from a real `healer up --metrics-port`."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from healer import spend
from healer.metrics import SPEND_DAYS, SPEND_TOP, Metrics
from healer.records import Event
from healer.store import open_store
from tests.conftest import REPO, make_repo, wait_until
from tests.fleet.conftest import scripted_policy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> str:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return ""


def _value(body: str, name: str, **labels: str) -> float | None:
    sel = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf"^{re.escape(name)}{re.escape('{' + sel + '}') if sel else ''} (\S+)$", body, re.M)
    return float(m.group(1)) if m else None


def _spent(s, run: str, ticket: str, usd: float, preset: str = "claude", day: str = "2026-12-07") -> None:
    s.append("loop.started", run, {"preset": preset, "ticket": ticket})
    s.append("loop.iteration", run, {"n": 1, "cost_usd": usd, "ticket": ticket, "day": day})


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_up_serves_spend_per_cli_day_and_top_tickets(tmp_path: Path):
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir()
    pol = scripted_policy(pool_size=1).model_dump(mode="json", by_alias=True)
    pol["fleet"]["dispatch_tick"] = "1s"
    pol["supervisor"] = {"tick": "1s"}
    (root / "healer.yaml").write_text(yaml.safe_dump(pol, sort_keys=False))
    s = open_store(root)
    for i in range(1, 13):  # 12 tickets spent before `up` started: the counter is the whole log's
        _spent(s, f"T-{i}-01", f"T-{i}", float(i), day="2026-12-06" if i == 1 else "2026-12-07")
    port = _free_port()
    up = subprocess.Popen([sys.executable, "-m", "healer", "up", "--quiet", "--metrics-port", str(port), "-C", str(root)],
                          cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        body = wait_until(lambda: (b := _scrape(port)) and _value(b, "healer_spend_usd_total", cli="claude") == 78.0
                          and b, 90, "the whole log's spend on /metrics")
        assert _value(body, "healer_spend_usd_total", cli="codex") == 0.0  # every CLI from the first scrape
        assert _value(body, "healer_spend_day_usd", day="2026-12-06") == 1.0
        assert _value(body, "healer_spend_day_usd", day="2026-12-07") == 77.0
        tickets = re.findall(r'^healer_ticket_spend_usd\{ticket="([^"]+)"\} (\S+)$', body, re.M)
        assert len(tickets) == SPEND_TOP and {t for t, _ in tickets} == {f"T-{i}" for i in range(3, 13)}
        _spent(s, "T-1-02", "T-1", 30.0, preset="codex")  # spent while `up` runs: T-1 back into the top 10
        body = wait_until(lambda: (b := _scrape(port)) and _value(b, "healer_spend_usd_total", cli="codex") == 30.0
                          and b, 60, "the new spend on /metrics")
        tickets = dict(re.findall(r'^healer_ticket_spend_usd\{ticket="([^"]+)"\} (\S+)$', body, re.M))
        assert len(tickets) == SPEND_TOP and float(tickets["T-1"]) == 31.0 and "T-3" not in tickets
        assert _value(body, "healer_spend_usd_total", cli="claude") == 78.0  # not counted twice
        up.send_signal(signal.SIGTERM)
        _, err = up.communicate(timeout=60)
        assert up.returncode == 0, err[-3000:]
    finally:
        s.close()
        if up.poll() is None:
            up.kill()
            up.wait(timeout=30)


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_dispatch_serves_the_spend_after_its_pass(tmp_path: Path):
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir()
    pol = scripted_policy(pool_size=1).model_dump(mode="json", by_alias=True)
    pol["fleet"]["dispatch_tick"] = "1s"
    (root / "healer.yaml").write_text(yaml.safe_dump(pol, sort_keys=False))
    s = open_store(root)
    _spent(s, "T-1-01", "T-1", 2.5, preset="command")
    port = _free_port()
    p = subprocess.Popen([sys.executable, "-m", "healer", "dispatch", "--metrics-port", str(port), "-C", str(root)],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _value(_scrape(port), "healer_spend_usd_total", cli="command") == 2.5, 90,
                   "the spend on dispatch's /metrics")
        _spent(s, "T-1-02", "T-1", 1.0, preset="command")
        body = wait_until(lambda: (b := _scrape(port)) and _value(b, "healer_spend_usd_total", cli="command") == 3.5
                          and b, 60, "the new spend after a pass")
        assert _value(body, "healer_ticket_spend_usd", ticket="T-1") == 3.5
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err[-3000:]
    finally:
        s.close()
        if p.poll() is None:
            p.kill()
            p.wait(timeout=30)


def test_only_the_dispatcher_exports_spend_and_its_label_sets_stay_bounded():
    assert "healer_spend_usd_total" not in Metrics("supervise").render()
    m = Metrics("dispatch")
    led = spend.Ledger()
    charged = []
    for d in range(1, 21):  # 20 days of 30 tickets, one forged preset among them
        for t in range(30):
            e = Event(d * 100 + t, 0.0, "loop.iteration", f"R-{t}", {"cost_usd": 0.01, "ticket": f"T-{d}-{t}",
                                                                     "day": f"2026-11-{d:02d}"})
            if (c := led.add(e)) is not None:
                charged.append(c)
    led.add(Event(9999, 0.0, "loop.started", "R-x", {"preset": "x" * 500, "ticket": "T-x"}))
    if (c := led.add(Event(10000, 0.0, "loop.iteration", "R-x", {"cost_usd": 1.0, "ticket": "T-x", "day": "2026-11-20"}))):
        charged.append(c)
    m.spent(led, charged)
    body = m.render()
    assert len(re.findall(r"^healer_spend_day_usd\{", body, re.M)) == SPEND_DAYS
    assert len(re.findall(r"^healer_ticket_spend_usd\{", body, re.M)) == SPEND_TOP
    clis = set(re.findall(r'^healer_spend_usd_total\{cli="([^"]+)"\}', body, re.M))
    assert clis == {*spend.CLIS, spend.OTHER}
    assert _value(body, "healer_spend_usd_total", cli="other") == pytest.approx(7.0)
