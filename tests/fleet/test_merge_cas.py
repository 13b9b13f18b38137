"""A proposal is merged only if it is still wanted right before main advances (compare-and-set on the board): a
human who rejects it, or moves its ticket, while its merge gates run wins (issue 41: a mutant that dropped the
proposal's half of the check survived every game day)."""

from __future__ import annotations

import pytest

from tests.fleet.conftest import gate, scripted_policy


class _HumanDuringGates:
    """The real gates, with a human's board write made while they run."""

    def __init__(self, real, store, act):
        self.real, self.store, self.act = real, store, act

    def main(self, *a, **kw):
        return self.real.main(*a, **kw)

    def proposal(self, root, policy, p, clock, *, still_wanted=None):
        self.act(self.store, p)
        return self.real.proposal(root, policy, p, clock, still_wanted=still_wanted)


@pytest.mark.parametrize("act", ["reject the proposal", "move the ticket"])
def test_what_a_human_decides_while_the_merge_gates_run_is_never_merged_over(fleet_factory, act):
    f = fleet_factory(scripted_policy(merge_gates=[gate("ok", "pass")]))
    f.add("T-1")
    f.d.tick()
    f.settle()
    main_before = f.main_head()

    def human(store, p):
        if act == "reject the proposal":
            store.decide_proposal(p.id, "rejected", "rejected by a human while its gates ran")
        else:
            store.move_ticket("T-1", "needs_human", actor="human", reason="a human takes it")

    f.d.merger.gates = _HumanDuringGates(f.d.merger.gates, f.store, human)  # this dispatcher's merger only
    for _ in range(3):
        f.d.tick()
    assert f.main_head() == main_before  # main never advanced
    assert f.state("T-1") != "done"
    assert [p.state for p in f.store.proposals("T-1")][0] == "rejected"
    assert f.events("proposal.withheld", "T-1")
