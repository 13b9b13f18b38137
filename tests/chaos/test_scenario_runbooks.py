"""Scenarios load policies and runbooks exactly as a fleet does (issue 41 item 1): `include_runbooks` relative to
the scenario's folder (or absolute), a missing or invalid runbook a located validation error, the rules in force
listed with where they come from."""

from __future__ import annotations

import os

import pytest

from chaos.scenario import load
from healer.errors import InvalidInput

RUNBOOK = """---
id: my-stuck
when: agent_stuck
for: %s
do: [stop_agent]
escalate_after: 5
---
# my stuck
## Symptom
s
## Cause
c
## What healer does
h
## What a human does
w
"""

SCENARIO = """name: rb
duration: 4h
overrides:
  include_runbooks: [%s]
fleet:
  tickets:
    - {id: S-1, behaviour: hangs}
expect:
  - count: {kind: intent.done, subject: S-1, min: 1}
"""


def _world(tmp_path, runbook_for="0s", ref="../runbooks/"):
    (tmp_path / "runbooks").mkdir()
    (tmp_path / "runbooks" / "stuck.md").write_text(RUNBOOK % runbook_for)
    (tmp_path / "scen").mkdir()
    f = tmp_path / "scen" / "rb.yaml"
    f.write_text(SCENARIO % ref)
    return f


@pytest.mark.parametrize("ref", ["../runbooks/", "ABS"])
def test_the_runbooks_rule_is_in_force_from_any_working_directory(tmp_path, ref, monkeypatch):
    f = _world(tmp_path, ref=str(tmp_path / "runbooks") if ref == "ABS" else ref)
    monkeypatch.chdir(tmp_path.parent)  # relative to the scenario's folder, not the cwd
    sc = load(f)
    pol = sc.effective_policy()
    assert [r.id for r in pol.rules] == ["my-stuck"] and pol.include_runbooks == []  # inlined: read once
    force = {r["when"]: r for r in sc.rules_in_force()}
    assert force["agent_stuck"]["id"] == "my-stuck" and force["agent_stuck"]["from"] == "runbook"
    assert force["frozen_in_progress"]["from"] == "default"


def test_a_missing_runbook_folder_fails_validation_located(tmp_path):
    f = _world(tmp_path, ref="no/such/dir/")
    with pytest.raises(InvalidInput) as e:
        load(f)
    assert e.value.lines[0].startswith(f"{f}:4:3: overrides.include_runbooks: expected runbooks that load, got: ")
    assert e.value.lines[0].endswith(f"{os.sep}no{os.sep}such{os.sep}dir: no such runbook file or folder")


def test_an_invalid_runbook_fails_validation_quoting_its_own_line(tmp_path):
    f = _world(tmp_path, runbook_for="90")
    with pytest.raises(InvalidInput) as e:
        load(f)
    assert "overrides.include_runbooks: expected runbooks that load, got: " in e.value.lines[0]
    assert "stuck.md:4:1: for: expected a duration with a unit (e.g. 90s or 90m), got 90" in e.value.lines[0]
