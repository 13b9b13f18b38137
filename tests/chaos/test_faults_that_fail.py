"""A fault or probe that did not happen is no pass: the game day is `error` with the reason in every output
(console, Markdown, HTML, JUnit, the journal, pytest), and an expectation anchored on a fault that was never
applied is broken as vacuous."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest

from chaos import engine
from chaos.scenario import load
from tests.conftest import PY, healer, make_repo

FROZEN_WITHOUT_DISPATCHER = """\
name: frozen-without-dispatcher
description: a frozen_dispatch aimed at a dispatcher that was killed a minute before
mode: simulated
seed: 1
duration: 30m
fleet:
  pool_size: 1
  tickets:
    - {id: T-, count: 2, behaviour: succeeds, params: {duration: 5m}}
faults:
  - {at: 1m, fault: kill_dispatcher}
  - {at: 2m, fault: frozen_dispatch}
expect:
  - name: nothing launched while frozen
    never_after: {after: {kind: chaos.fault, payload: {fault: frozen_dispatch}}, never: {kind: dispatch.launched}}
"""


def _write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


# serial: a real game day whose dispatcher must be dead when its fault fires: failed side by side under xdist (issue 35),
# the fault's timing depends on the CPU its daemons get
@pytest.mark.serial
def test_a_fault_aimed_at_a_dead_daemon_errs_the_game_day_in_every_output(tmp_path):
    sc = _write(tmp_path, FROZEN_WITHOUT_DISPATCHER)
    rep, junit = tmp_path / "rep", tmp_path / "junit.xml"
    # wide enough that the table's reason cell keeps "no live dispatcher" on one line (an xdist worker's child
    # gets rich's default 80 columns, where the cell wraps it)
    r = healer("gameday", "run", str(sc), "--report", str(rep), "--junit", str(junit), env={"COLUMNS": "200"})
    assert r.returncode == 1, r.stdout + r.stderr
    out = " ".join(r.stdout.split())
    assert "ERROR" in out and "no live dispatcher" in out
    md = (rep / "report.md").read_text()
    assert "— ERROR" in md and "**error:**" in md and "fault frozen_dispatch: not applied: no live dispatcher" in md
    assert "no live dispatcher" in (rep / "report.html").read_text()
    j = json.loads((rep / "journal.json").read_text())
    assert j["status"] == "aborted" and "no live dispatcher" in j["experiments"][0]["error"]
    [act] = [a for a in j["run"] if a["activity"]["name"] == "fault frozen_dispatch"]
    assert act["status"] == "skipped" and "no live dispatcher" in act["output"]
    [case] = ET.parse(junit).getroot().iter("testcase")
    err = case.find("error")
    assert err is not None and "no live dispatcher" in err.get("message")
    # the fault that did not happen is no anchor: the expectation after it holds only vacuously, and says so
    res = engine.run(load(sc), tmp_path / "wd")
    assert res.status == "error"
    [c] = [c for c in res.checks if not c.name.startswith("invariant(")]  # the standard invariants are added to every run
    assert not c.ok and "chaos.fault with payload {fault: frozen_dispatch} never happened" in c.message  # its anchor


def test_a_fault_whose_event_never_comes_leaves_its_expectations_vacuous(tmp_path):
    sc = _write(tmp_path, """\
    name: never-fired
    description: a kill chained on an event that never happens
    mode: simulated
    seed: 1
    duration: 20m
    fleet:
      tickets:
        - {id: T-1, behaviour: succeeds, params: {duration: 2m}}
    faults:
      - {on_event: repair.launched, fault: kill_agent, target: T-1}
    expect:
      - name: killed at most once
        count: {kind: chaos.fault, payload: {fault: kill_agent}, max: 1}
      - tickets: {match: "T-*", state: done, equals: 1}
    """)
    r = engine.run(load(sc), tmp_path / "wd")
    assert r.status == "error" and "fault kill_agent on T-1: never applied (on_event repair.launched never came)" in r.error
    bad = {c.name: c.message for c in r.failures}
    assert list(bad) == ["killed at most once"]
    assert "holds only vacuously: no kill_agent fault was ever applied" in bad["killed at most once"]


def test_an_agent_fault_with_no_live_agent_is_skipped_not_applied(tmp_path):
    sc = _write(tmp_path, """\
    name: kill-nobody
    description: kill_agent before any agent runs
    mode: simulated
    seed: 1
    duration: 20m
    fleet:
      tickets:
        - {id: T-1, state: done}
    faults:
      - {at: 1m, fault: kill_agent, target: T-1}
    expect:
      - tickets: {match: "T-*", state: done, equals: 1}
    """)
    r = engine.run(load(sc), tmp_path / "wd")
    assert r.status == "error" and "fault kill_agent on T-1: not applied: no live agent on T-1" in r.error


@pytest.mark.long  # 20 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_the_pytest_plugin_reports_the_error(tmp_path):
    """`pytest chaos/scenarios/...` (the plugin): a game day that errs fails its item with the reason."""
    import subprocess

    d = tmp_path / "sc"
    d.mkdir()
    _write(d, FROZEN_WITHOUT_DISPATCHER, "frozen-without-dispatcher.yaml")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    r = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(d)],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "no live dispatcher" in r.stdout


@pytest.mark.skipif(not os.path.exists(os.path.join(os.path.dirname(sys.executable), "chaos")),
                    reason="chaostoolkit not installed")
@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_ctk_supervise_once_skipped_by_a_held_lease_is_errored(tmp_path):
    from healer.ctk.run import errors, verdict
    from healer.store import open_store

    root = make_repo(tmp_path / "fleet")
    assert healer("init", "--root", str(root)).returncode == 0
    store = open_store(root)
    # another supervisor (this live process) holds the lease: the experiment's tick is skipped
    import socket

    assert store.acquire_lease("supervisor", f"supervisor@{socket.gethostname()}:{os.getpid()}:x", os.getpid(),
                               socket.gethostname(), 3600)
    exp = _write(tmp_path, """\
    version: 1.0.0
    title: one tick answers
    description: the supervisor's tick is healer's answer
    method:
      - type: action
        name: one supervisor tick
        provider: {type: python, module: healer.ctk.actions, func: supervise_once}
    """, "exp.yaml")
    rep, junit = tmp_path / "rep", tmp_path / "junit.xml"
    r = healer("gameday", "run", str(exp), "--root", str(root), "--report", str(rep), "--junit", str(junit),
               env={**os.environ, "HEALER_GAMEDAY_HOME": str(tmp_path / "gd")})
    store.close()
    assert r.returncode == 1, r.stdout + r.stderr
    assert "ERRORED" in r.stdout and "skipped its tick" in r.stdout
    j = json.loads((rep / "journal.json").read_text())
    assert verdict(j) == "ERRORED" and j["healer"]["status"] == "errored"
    assert any("lease" in e for e in errors(j)), errors(j)
    assert "ERRORED" in (rep / "report.md").read_text()
    assert ET.parse(junit).getroot().find("testsuite").get("errors") == "1"
