"""A Chaos Toolkit experiment whose steady state fails before the method: explained, not "COMPLETED" and an
unexplained exit 1 (issue 41). Pure: a journal as chaostoolkit-lib writes it for that case."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from chaos.ctk_journal import not_steady, ok, verdict
from chaos.report_ctk import junit

JOURNAL = {
    "experiment": {"title": "fleet heals a frozen ticket"}, "status": "completed", "deviated": False, "duration": 1.5,
    "steady_states": {"before": {"steady_state_met": False, "probes": [
        {"activity": {"name": "fleet-is-healthy", "tolerance": True}, "output": False, "tolerance_met": False,
         "status": "succeeded"}]}, "after": None, "during": []},
    "run": [], "rollbacks": [],
}


def test_not_steady_before_the_method_is_said_with_the_probe_and_its_tolerance():
    why = not_steady(JOURNAL)
    assert why is not None and "probe 'fleet-is-healthy' gave False, its tolerance is True" in why
    assert "the method never ran" in why
    assert not ok(JOURNAL) and verdict(JOURNAL) == "NOT STEADY"


def test_junit_names_the_failed_steady_state():
    case = ET.fromstring(junit([JOURNAL])).find("testsuite/testcase")
    fail = case.find("failure")
    assert fail.get("type") == "SteadyStateNotMet" and "fleet-is-healthy" in fail.get("message")


def test_a_met_steady_state_is_not_flagged():
    j = {**JOURNAL, "steady_states": {"before": {"steady_state_met": True, "probes": []}}}
    assert not_steady(j) is None
