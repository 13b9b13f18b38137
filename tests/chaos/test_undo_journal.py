"""A game day's undo journal folder lives only as long as something is left to undo."""

from __future__ import annotations

from chaos.engine.sim import SimEngine
from chaos.faults.undo import UndoJournal
from chaos.scenario import SCENARIO_DIR, load


def test_finish_removes_a_settled_journal_and_the_empty_home(tmp_path):
    home = tmp_path / "home"
    j = UndoJournal(home / "run-1")
    uid = j.register("remove_file", path=str(tmp_path / "nothing"), role="test")
    assert not j.finish() and j.folder.exists()  # a pending undo keeps it, for `healer gameday clean`
    j.done(uid)
    other = UndoJournal(home / "run-2")
    assert j.finish() and not j.folder.exists() and home.exists()  # another run's folder keeps the home
    assert other.finish() and not home.exists()


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
