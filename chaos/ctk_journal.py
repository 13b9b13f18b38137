"""A Chaos Toolkit journal's verdict, as healer reads it: what failed, whether it passed, one word for it.

Pure functions of the journal chaostoolkit-lib wrote: healer/ctk/run.py decides a run with them, and the reports
(chaos/report_ctk.py, chaos/html_report.py) print them, without importing the runner that calls the reports.
"""

from __future__ import annotations

from typing import Any


def errors(journal: dict[str, Any]) -> list[str]:
    """One line per method or rollback activity that failed (raised, or skipped: a supervise_once whose tick did
    not run): the fault or healer's answer did not happen, so the experiment tested nothing."""
    out = []
    for key in ("run", "rollbacks"):
        for a in journal.get(key) or []:
            if a.get("status") not in (None, "succeeded"):
                name = (a.get("activity") or {}).get("name", "?")
                why = a.get("exception") or a.get("output") or a.get("status")
                if isinstance(why, list):
                    why = "".join(str(x) for x in why).strip().splitlines()[-1:] or ["?"]
                    why = why[0]
                out.append(f"{name}: {a.get('status')}: {str(why)[:300]}")
    return out


def ok(journal: dict[str, Any]) -> bool:
    """Completed, not deviated, no steady state found unmet (chaostoolkit-lib marks a hypothesis that
    fails before the method as `completed` without deviating: the method never ran, which is no pass), and no
    activity that failed (errored)."""
    ss = journal.get("steady_states") or {}
    unmet = any((ss.get(ph) or {}).get("steady_state_met") is False for ph in ("before", "after"))
    return journal.get("status") == "completed" and not journal.get("deviated") and not unmet and not errors(journal)


def not_steady(journal: dict[str, Any]) -> str | None:
    """Why the steady state failed before the method, or None: chaostoolkit-lib then stops (`completed`, not
    deviated) without running the method, so nothing was tested; the console and JUnit say which probe and what
    it gave against its tolerance (issue 41)."""
    before = (journal.get("steady_states") or {}).get("before") or {}
    if before.get("steady_state_met") is not False:
        return None
    bad = [p for p in before.get("probes") or [] if not p.get("tolerance_met")]
    if not bad:
        return "steady state not met before the method; the method never ran"
    p = bad[0]
    act = p.get("activity") or {}
    out = p.get("output")
    shown = str(out if not isinstance(out, dict) else {k: out[k] for k in list(out)[:4]})[:200]
    return (f"steady state not met before the method: probe {act.get('name', '?')!r} gave {shown}, its tolerance is "
            f"{act.get('tolerance')!r}; the method never ran (the fleet was not steady to begin with)")


def verdict(journal: dict[str, Any]) -> str:
    """PASS, ERRORED (an activity failed), NOT STEADY (the hypothesis failed before the method), DEVIATED, or
    chaostoolkit-lib's status."""
    if ok(journal):
        return "PASS"
    if errors(journal):
        return "ERRORED"
    if not_steady(journal):
        return "NOT STEADY"
    return "DEVIATED" if journal.get("deviated") else str(journal.get("status")).upper()
