"""The console in a real browser (Debian's headless chromium through Selenium and chromedriver), against a fleet
run by a real `healer up --console-port 0` whose agents are real child processes (tests/console/chatty_agent.py):

- a ticket's transitions appear live on the board, without a reload (the dispatcher launches a ticket added now);
- an agent's output streams into its page, markup shown as text;
- a steer clicked in the browser (stop an agent) takes effect and is in `healer journal` with actor operator:<name>;
- a ticket escalated from the browser pages, and the page is acknowledged from the browser.

Screenshots go to $HEALER_ARTIFACTS (.ci/run: .ci/artifacts/, kept by CI), else to pytest's tmp folder.
Under CI=true a missing chromium, chromedriver or selenium fails these tests; elsewhere they skip."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from healer.store import open_store
from tests.conftest import healer, make_repo, wait_until
from tests.fleet.conftest import scripted_policy

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
DRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)
AGENT = Path(__file__).with_name("chatty_agent.py")
OPERATOR = "ci-operator"


def _need_browser() -> None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing = "selenium (pip install -e '.[dev]')"
    else:
        missing = "" if CHROMIUM and DRIVER else "chromium and chromedriver (apt-get install chromium chromium-driver)"
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing} is not installed; .ci/run installs it")
        pytest.skip(reason=f"{missing} is not installed")


def _store(root: Path):
    return open_store(root)


def _read(root: Path, fn):
    s = _store(root)
    try:
        return fn(s)
    finally:
        s.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    d = Path(os.environ["HEALER_ARTIFACTS"]) / "console" if os.environ.get("HEALER_ARTIFACTS") else tmp_path_factory.mktemp("shots")
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """A fleet under a real `healer up --console-port 0`: H-1's agent is chatty and hangs, B-1 waits for B-0."""
    _need_browser()
    tmp = tmp_path_factory.mktemp("console-fleet")
    root = make_repo(tmp / "fleet")
    (root / ".healer").mkdir()
    pol = scripted_policy(pool_size=3).model_dump(mode="json", by_alias=True)
    pol["fleet"]["loop_command"] = [sys.executable, str(AGENT), "--hang-max", "120", "--run-id", "{run_id}"]
    pol["fleet"]["dispatch_tick"] = "1s"
    pol["supervisor"] = {"tick": "1s"}
    (root / "healer.yaml").write_text(yaml.safe_dump(pol, sort_keys=False))
    s = _store(root)
    s.add_ticket("chatty <b>one</b>", id="H-1")
    s.add_ticket("never started", id="B-0", state="blocked")
    s.add_ticket("waits for B-0", id="B-1", blocked_by=["B-0"])  # queued, and no agent starts on it
    s.close()
    env = {**os.environ, "USER": OPERATOR}
    env.pop("HEALER_CONSOLE_TOKEN", None)
    err = (tmp / "up.stderr").open("w")  # read back on failure (a pipe nobody drains could block `up`)
    up = subprocess.Popen([sys.executable, "-m", "healer", "up", "-C", str(root), "--console-port", "0"], env=env,
                          stdout=subprocess.PIPE, stderr=err, text=True)
    url: list[str] = []
    got = threading.Event()

    def read() -> None:
        for line in up.stdout:  # type: ignore[union-attr]
            if "console at " in line and not url:
                url.append(line.split("console at ", 1)[1].strip())
                got.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert got.wait(90), "healer up printed no console URL"
        yield root, url[0]
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()
        for a in _read(root, lambda st: st.agents()):  # the agents `up` started outlive it by design: ours to end
            if a.pid:
                try:
                    os.kill(a.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    err.close()
    assert up.returncode == 0, (tmp / "up.stderr").read_text()[-2000:]


@pytest.fixture(scope="module")
def browser(fleet, tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1000",
              f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(DRIVER), options=opts)
    d.set_page_load_timeout(30)
    yield d
    d.quit()


def _wait(d, cond, what: str, timeout: float = 30):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(d, timeout, poll_frequency=0.1).until(lambda drv: cond(drv), message=what)
    except TimeoutException:
        raise AssertionError(f"{what}: not within {timeout}s; the page at {d.current_url}: {d.page_source[-1500:]}") from None


def _css(d, sel: str):
    from selenium.webdriver.common.by import By

    return d.find_elements(By.CSS_SELECTOR, sel)


def _agent_of(root: Path, tid: str) -> str:
    [a] = wait_until(lambda: [a for a in _read(root, lambda st: st.agents(states=["running"])) if a.ticket_id == tid],
                     timeout=60, what=f"{tid}'s agent running")
    return a.id


def test_a_tickets_transitions_appear_live_on_the_board_without_a_reload(fleet, browser, shots):
    root, url = fleet
    browser.get(url)
    _wait(browser, lambda d: "on" in d.find_element("id", "live").get_attribute("class"), "the live feed connected")
    browser.execute_script("window.__not_reloaded = 42;")
    s = _store(root)
    try:
        s.add_ticket("added while you watch", id="N-1")  # the dispatcher launches it within its 1 s tick
    finally:
        s.close()
    _wait(browser, lambda d: _css(d, 'section.col[data-state="in_progress"] li.card[data-ticket="N-1"]'),
          "N-1's card moved to in_progress live")
    assert browser.execute_script("return window.__not_reloaded;") == 42
    feed = " ".join(li.text for li in _css(browser, "#feed li"))
    assert "ticket.moved" in feed and "N-1" in feed
    assert "<b>one</b>" in " ".join(c.text for c in _css(browser, 'li.card[data-ticket="H-1"]'))  # markup as text
    browser.save_screenshot(str(shots / "board-live.png"))
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE" and "favicon" not in e["message"]]
    assert severe == []  # no CSP violation, no script error


def test_an_agents_output_streams_into_its_page(fleet, browser, shots):
    root, url = fleet
    aid = _agent_of(root, "H-1")
    browser.get(f"{url}agents/{aid}")
    out = _wait(browser, lambda d: d.find_element("id", "output") if "chatty: line" in d.find_element("id", "output").text else None,
                "the agent's output on the page")
    first = len(out.text)
    _wait(browser, lambda d: len(d.find_element("id", "output").text) > first + 40, "more output, streamed without a reload")
    assert '<script>document.title="pwned"</script>' in out.text and browser.title != "pwned"
    assert _css(browser, "#output script, #output img") == []
    browser.save_screenshot(str(shots / "agent-output.png"))


def test_stopping_an_agent_from_the_browser_takes_effect_and_is_journaled_as_the_operator(fleet, browser, shots):
    root, url = fleet
    aid = _agent_of(root, "H-1")
    browser.get(f"{url}agents/{aid}")
    _css(browser, 'button[data-action="stop"]')[0].click()
    outcome = _wait(browser, lambda d: d.find_element("id", "outcome"), "the steer's outcome page")
    assert outcome.text.startswith("done"), outcome.text
    browser.save_screenshot(str(shots / "stop-agent.png"))
    a = _read(root, lambda st: st.agent(aid))
    assert a.state in ("stopped", "exited", "lost")  # stopped by the steer; the dispatcher may record its end first
    with pytest.raises(ProcessLookupError):
        os.kill(a.pid, 0)  # our agent's pid: gone (reaped by `up`, its parent)
    out = healer("journal", "--json", "--kind", "remedy.", "-C", str(root))
    rows = [json.loads(x)["payload"] for x in out.stdout.splitlines()]
    assert {"action": "stop_agent", "actor": f"operator:{OPERATOR}"}.items() <= next(r for r in rows if r["action"] == "stop_agent").items()


def test_a_page_sent_for_an_escalation_is_acknowledged_from_the_browser(fleet, browser, shots):
    root, url = fleet
    browser.get(f"{url}tickets/B-1")
    _css(browser, 'button[data-action="escalate"]')[0].click()
    assert _wait(browser, lambda d: d.find_element("id", "outcome"), "escalated").text.startswith("done")
    assert _read(root, lambda st: st.ticket("B-1").state) == "needs_human"
    browser.get(f"{url}supervisor")
    _css(browser, 'button[data-action="ack"][data-subject="escalate:B-1"]')[0].click()
    assert _wait(browser, lambda d: d.find_element("id", "outcome"), "acknowledged").text.startswith("done")
    browser.get(f"{url}supervisor")
    row = _wait(browser, lambda d: [tr for tr in _css(d, "table.pages tbody tr") if "escalate:B-1" in tr.text], "the page's row")[0]
    assert f"acknowledged by operator:{OPERATOR}" in row.text
    browser.save_screenshot(str(shots / "page-acknowledged.png"))
    acked = _read(root, lambda st: st.events(kinds=["notify.acked"], subject="escalate:B-1"))
    assert [e.payload["actor"] for e in acked] == [f"operator:{OPERATOR}"]
