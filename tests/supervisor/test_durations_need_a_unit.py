"""A bare number is no duration in a policy, a runbook or a scenario (issue 41 item 2): one located line that
suggests the unit, never a silent "seconds"."""

from __future__ import annotations

import pytest

from chaos.scenario import load as load_scenario
from healer.core.runbooks import parse
from healer.errors import InvalidInput
from healer.policy.load import validate_text
from healer.policy.schema import Health


def test_policy_bare_number_is_refused_with_the_unit_suggested():
    with pytest.raises(InvalidInput) as e:
        validate_text("health:\n  agent_stuck: 90\n", "p.yaml")
    assert e.value.lines == ["p.yaml:2:3: health.agent_stuck: expected a duration with a unit (e.g. 90s or 90m), got 90"]


def test_runbook_bare_for_is_refused():
    rule, errs = parse("rb.md", "---\nid: x\nwhen: agent_stuck\nfor: 90\ndo: [stop_agent]\n---\n")
    assert rule is None and errs == ["rb.md:4:1: for: expected a duration with a unit (e.g. 90s or 90m), got 90"]


def test_scenario_bare_number_is_refused(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("name: s\nduration: 90\nexpect: [{invariant: intents_settled}]\n"
                 "overrides: {health: {agent_stuck: 1.5}}\n")
    with pytest.raises(InvalidInput) as e:
        load_scenario(f)
    assert e.value.lines[0] == f"{f}:2:1: duration: expected a duration with a unit (e.g. 90s or 90m), got 90"


def test_zero_and_units_pass_and_python_callers_still_give_seconds():
    assert validate_text("health:\n  agent_stuck: 90m\nsupervisor: {tick: 0}\n", "p.yaml").health.agent_stuck == 5400
    assert Health(agent_stuck=90).agent_stuck == 90  # the python API: seconds, as the model holds them
