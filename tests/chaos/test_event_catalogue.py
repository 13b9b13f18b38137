"""The event catalogue (chaos/event_catalogue.py) and the warning it gives: a checker's `payload: {key: …}` that
no event of its kind ever carries can never match, and `healer gameday validate` says where and why (issue 34)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos import event_catalogue as ec
from chaos.engine.sim import SimEngine
from chaos.scenario import SCENARIO_DIR, load
from tests.conftest import healer

SCENARIO = """\
name: impossible-payload
description: a checker asks for payload keys its events never carry
exercises: the impossible-payload warning
mode: simulated
seed: 1
duration: 1h
fleet:
  tickets:
    - {id: T-1, behaviour: success}
faults:
  - {at: 60s, fault: kill_supervisor}
expect:
  - name: healed after the fault
    within: {kind: supervisor.tick, after: {kind: chaos.fault, payload: {fualt: kill_supervisor}}, max: 5m}
  - name: a ticket moved to done
    count: {kind: ticket.moved, payload: {state: done}, min: 1}
  - name: this one can match
    count: {kind: ticket.moved, payload: {to: done}, min: 1}
"""


@pytest.mark.long  # 11 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_validate_warns_on_each_payload_key_that_can_never_match_one_line_each(tmp_path):
    f = tmp_path / "impossible-payload.yaml"
    f.write_text(SCENARIO)
    r = healer("gameday", "validate", str(f))
    assert r.returncode == 0, r.stderr  # a warning, not a refusal: the file is valid
    lines = r.stderr.splitlines()
    assert len(lines) == 2, r.stderr
    assert lines[0].startswith(f"{f}:14:") and "expect[0].within.after.payload.fualt: warning: no 'chaos.fault' event " \
        "ever carries payload key 'fualt', so this can never match" in lines[0] and "(did you mean 'fault'?)" in lines[0]
    assert lines[1].startswith(f"{f}:16:") and "expect[1].count.payload.state" in lines[1] and "from" in lines[1] \
        and "to" in lines[1]


def test_no_shipped_scenario_asks_for_an_impossible_payload():
    files = sorted(SCENARIO_DIR.rglob("*.yaml"))
    assert len(files) > 20
    bad = [w for f in files for w in load(f).warnings if "payload key" in w]
    assert bad == []


def test_the_catalogue_reads_literal_writes_and_leaves_unknown_payloads_open():
    assert {"fault", "target"} <= ec.keys_for("chaos.fault")  # written through apply_fault's returned kind
    assert {"from", "to", "actor"} <= ec.keys_for("ticket.moved")
    assert ec.keys_for("dispatch.paused") == frozenset({"value"})  # set_setting(..., event=…)
    assert {"action"} <= ec.keys_for("intent.done")  # the f"intent.{state}" family
    assert {"files", "with", "main"} <= ec.keys_for("proposal.conflict")
    assert ec.keys_for("no.such_kind") is None  # no writer found: nothing claimed
    assert [k for k, _ in ec.impossible(["ticket.moved"], {"to": "done", "state": "done"})] == ["state"]
    assert ec.impossible(["ticket.moved", "no.such_kind"], {"state": 1}) == []  # one unknown kind: nothing claimed


@pytest.mark.long  # 15 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@pytest.mark.parametrize("name", ["red-main", "blocked-behind-stale-label"])
def test_every_payload_key_a_game_day_writes_is_in_the_catalogue(tmp_path, name):
    """Soundness where it matters: no warning for a key that real events carry. Every event of a simulated game
    day whose kind the catalogue knows (closed) carries only keys the catalogue lists."""
    sc = load(Path(SCENARIO_DIR) / f"{name}.yaml")
    eng = SimEngine(sc, tmp_path / "w")
    eng.begin()
    eng.advance(sc.duration)
    events = eng.history().events
    eng.end()
    assert len(events) > 20
    missing = {}
    for e in events:
        keys = ec.keys_for(e.kind)
        if keys is not None and not set(e.payload) <= keys:
            missing.setdefault(e.kind, set()).update(set(e.payload) - keys)
    assert missing == {}
