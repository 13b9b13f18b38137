"""A game day's undo journal folder lives only as long as something is left to undo."""

from __future__ import annotations

import os

from chaos.engine.sim import SimEngine
from chaos.faults.undo import UndoJournal
from chaos.scenario import SCENARIO_DIR, load


def test_finish_removes_a_settled_journal_and_the_empty_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HEALER_GAMEDAY_HOME", str(home))
    j = UndoJournal(home / "run-1")
    uid = j.register("remove_file", path=str(tmp_path / "nothing"), role="test")
    assert not j.finish() and j.folder.exists()  # a pending undo keeps it, for `healer gameday clean`
    j.done(uid)
    other = UndoJournal(home / "run-2")
    assert j.finish() and not j.folder.exists() and home.exists()  # another run's folder keeps the home
    assert other.finish() and not home.exists()
    elsewhere = UndoJournal(tmp_path / "mine" / "run")  # a journal in a caller's folder: that folder is not ours
    assert elsewhere.finish() and (tmp_path / "mine").is_dir()
    failed = UndoJournal(home / "run-3")
    failed.register("remove_file", path=str(tmp_path / "a-folder"), role="test")
    (tmp_path / "a-folder").mkdir()  # unlink fails on a folder: the undo fails
    failed.undo_all()
    assert failed.failed and not failed.pending() and not failed.finish() and failed.folder.exists()


def test_an_engine_driven_step_by_step_leaves_no_journal(tmp_path, monkeypatch):
    """The stateful explorations drive begin / advance / end themselves (not `engine.run`): the end of the
    run removes its journal, failpoint undo included."""
    home = tmp_path / "home"
    monkeypatch.setenv("HEALER_GAMEDAY_HOME", str(home))
    sc = load(SCENARIO_DIR / "kill-healer-mid-unblock.yaml")
    eng = SimEngine(sc, tmp_path / "wd")
    eng.begin()
    assert eng.undo.pending(), "the scenario arms failpoints: their environment is journalled"
    eng.advance(sc.duration)
    eng.end()
    assert not home.exists()


def test_a_simulated_run_that_crashes_disarms_its_failpoints_and_leaves_no_journal(tmp_path, monkeypatch):
    """An engine crash is a failed game day, and nothing of it outlives the run in this process: the
    failpoints it armed in the environment would fire in the next test's healer code."""
    from chaos import engine
    from healer import failpoints

    home = tmp_path / "home"
    monkeypatch.setenv("HEALER_GAMEDAY_HOME", str(home))
    monkeypatch.delenv(failpoints.ENV, raising=False)
    real_step = SimEngine.step

    def step(self, what, args):
        if self.steps == 0:
            assert failpoints.ENV in os.environ  # armed by the scenario at its start
            raise RuntimeError("the engine broke")
        return real_step(self, what, args)

    monkeypatch.setattr(SimEngine, "step", step)
    r = engine.run(load(SCENARIO_DIR / "kill-healer-mid-unblock.yaml"), tmp_path / "wd")
    assert r.status == "error" and "the engine broke" in r.error
    assert failpoints.ENV not in os.environ
    assert not home.exists()
