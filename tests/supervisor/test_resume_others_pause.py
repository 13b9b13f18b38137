"""healer lifts only its own dispatch pause: one set by someone else (a low disk, the dispatcher's red main, an
operator) stays until they lift it, or an action forces it (params.force)."""

from __future__ import annotations

from healer.core.fleet import why_not_resume
from healer.core.model import PlannedAction
from healer.remedy.actions import execute


def test_why_not_resume_names_the_pauser_and_only_force_overrides_it():
    assert why_not_resume(False, None, "green", "healer") == "dispatch is not paused"
    assert why_not_resume(True, "healer", "green", "healer") is None
    assert why_not_resume(True, None, "green", "healer") is None  # a pause nobody claimed: anyone lifts it
    why = why_not_resume(True, "disk_low", "green", "healer")
    assert why is not None and "disk_low" in why
    assert why_not_resume(True, "disk_low", "green", "healer", force=True) is None
    assert why_not_resume(True, "healer", "red", "healer") is not None


def test_resume_dispatch_aborts_on_someone_elses_pause_and_forced_lifts_it(shell_fleet):
    f = shell_fleet
    f.store.set_setting("dispatch.paused_reason", "disk_low")
    f.store.set_setting("dispatch.paused", True)
    out = execute(f.ctx(), PlannedAction("resume_dispatch", "dispatch"))
    assert out.status == "aborted" and "disk_low" in out.reason
    assert f.store.get_setting("dispatch.paused") is True and f.store.get_setting("dispatch.paused_reason") == "disk_low"
    assert execute(f.ctx(), PlannedAction("resume_dispatch", "dispatch", {"force": True})).status == "done"
    assert f.store.get_setting("dispatch.paused") is False
