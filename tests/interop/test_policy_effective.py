"""`healer policy show --effective` shows the runbooks' rules in force; `policy validate` refuses what `runbook
check` refuses; bare-number durations are refused by the CLI with one located line (issue 41)."""

from __future__ import annotations

import json

from tests.conftest import healer

RUNBOOK = """---
id: my-stuck
when: agent_stuck
for: 0s
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


def test_show_effective_lists_the_runbooks_rules_then_the_defaults(tmp_path):
    (tmp_path / "runbooks").mkdir()
    (tmp_path / "runbooks" / "stuck.md").write_text(RUNBOOK)
    pol = tmp_path / "healer.yaml"
    pol.write_text("include_runbooks: [runbooks/]\n")
    plain = json.loads(healer("policy", "show", str(pol), "--json").stdout)
    assert plain["rules"] == []
    r = healer("policy", "show", str(pol), "--effective", "--json", cwd=tmp_path.parent)
    assert r.returncode == 0, r.stderr
    rules = json.loads(r.stdout)["rules"]
    assert rules[0]["id"] == "my-stuck" and rules[0]["escalate_after"] == 5
    assert "stop-stuck-agent" not in [x["id"] for x in rules]  # the runbook's rule replaces the default
    assert "requeue-frozen" in [x["id"] for x in rules]


def test_validate_refuses_what_runbook_check_refuses(tmp_path):
    pol = tmp_path / "p.yaml"
    pol.write_text("rules:\n  - {id: x, when: main_red, do: [notify, stop_agent]}\n")
    r = healer("policy", "validate", str(pol))
    assert r.returncode == 65
    assert r.stderr.strip() == (f"{pol}:2:42: rules[0].do[1]: expected an action that applies to main_red "
                                "(notify, pause_dispatch), got stop_agent")
    rb = tmp_path / "rb.md"
    rb.write_text(RUNBOOK.replace("when: agent_stuck", "when: main_red"))
    r = healer("runbook", "check", str(rb))
    assert r.returncode == 65 and "do[0]: expected an action that applies to main_red" in r.stderr


def test_a_bare_number_duration_is_one_located_line(tmp_path):
    pol = tmp_path / "p.yaml"
    pol.write_text("health:\n  agent_stuck: 90\n")
    r = healer("policy", "validate", str(pol))
    assert r.returncode == 65
    assert r.stderr.strip() == f"{pol}:2:3: health.agent_stuck: expected a duration with a unit (e.g. 90s or 90m), got 90"
