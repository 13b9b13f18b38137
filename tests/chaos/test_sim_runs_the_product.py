"""The simulated game days run the product, not a mirror of it: break the product on purpose
(monkeypatch healer's own dispatcher decisions) and the simulated scenarios fail because of it.
With a copy of the dispatcher inside the engine (as before issue 12) both would still pass."""

from __future__ import annotations

from chaos import engine
from chaos.scenario import discover, load
from healer.core import fleet as rules


def _run(name: str, tmp_path):
    return engine.run(load(discover([name])[0]), tmp_path)


def test_a_dispatcher_blind_to_red_main_fails_red_main(monkeypatch, tmp_path):
    # the product's rule, broken: a failing main gate no longer turns main red
    monkeypatch.setattr(rules, "main_status", lambda prev, verdict, has_gates: rules.GREEN)
    r = _run("red-main", tmp_path)
    assert r.status == "failed", r.error
    broken = {c.name for c in r.failures}
    assert "paged within 2 minutes" in broken, broken  # no red, no page: the product's rule is what was tested


def test_a_dispatcher_that_never_opens_proposals_fails_the_suite(monkeypatch, tmp_path):
    # the product's exit classification, broken: a clean exit with a commit requeues instead of proposing
    real = rules.exit_move
    monkeypatch.setattr(rules, "exit_move", lambda agent, code, head, sig: real(agent, 1 if code == 0 else code, head, sig))
    r = _run("red-main", tmp_path)
    assert r.status == "failed", r.error
    assert "all work done" in {c.name for c in r.failures}
