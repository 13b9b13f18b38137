"""Rules: which actions answer which finding (docs/supervisor-core.md "Rules"), as data.

The built-in table below is the default; `policy.rules` (which the shell extends
with the rules of `include_runbooks`) override it per finding kind: for each
`when`, the first policy rule wins, else the default. A rule's `do` is a list of
whitelisted actions in order; steps that have nothing to act on for a given
finding (no live agent to stop, no unknown file to quarantine) are skipped.
`APPLICABLE` says which actions can mean anything for a finding kind; `healer
runbook check` refuses the others.
"""

from __future__ import annotations

from healer import actions
from healer.conventions import SENTINELS  # noqa: F401 - re-exported
from healer.policy.schema import FINDINGS, Rule, RuleLimits

# Both tables below are read from the action specs (healer/actions/, one file per action), live, so an action
# registered after import (a plugin, a test's toy) is in them.
#
# Which lease an action takes (ActionSpec.lease):
#   ticket   an unblock attempt on a ticket: holds the ticket's remediation lease (quiet period)
#            against every actor (rules, repair agent, humans), journaled under the ticket;
#   subject  touches a file or a worktree: holds that finding's subject within the supervisor's
#            memory (no second try inside the quiet period), but is no unblock attempt on a ticket;
#   None     touches nothing (alerts, the dispatch pause): no lease, no attempt recorded.
LEASE = actions.Leases()
TICKET_LEASE = actions.Names(lambda s: s.lease == "ticket")  # unblock attempts
NON_REMEDIATING = actions.Names(lambda s: s.lease is None)

# finding kind -> the actions that can mean anything for it (ActionSpec.answers)
APPLICABLE = actions.ByFinding(FINDINGS)


def _r(id: str, when: str, do: list[str], escalate_after: int | None = None, **limits: int) -> Rule:
    return Rule(id=id, when=when, do=do, escalate_after=escalate_after, limits=RuleLimits(**limits))


# one per finding kind; the shipped runbooks/ say the same thing in prose (a test keeps them equal)
DEFAULT_RULES: tuple[Rule, ...] = (
    _r("resume-dead-agent", "agent_dead", ["resume_agent"], 3, max_per_hour=30, max_per_ticket=5),
    _r("alert-idle-agent", "agent_idle", ["notify"]),
    _r("stop-stuck-agent", "agent_stuck", ["stop_agent"], 3, max_per_hour=20, max_per_ticket=3),
    _r("requeue-frozen", "frozen_in_progress", ["requeue_ticket"], 3, max_per_hour=50, max_per_ticket=3),
    _r("drop-stale-label", "stale_label", ["drop_label"], 3, max_per_hour=50, max_per_ticket=3),
    _r("unblock-free-ticket", "stale_block", ["unblock_ticket"], 3, max_per_hour=50, max_per_ticket=3),
    _r("remove-orphan-worktree", "orphan_worktree", ["quarantine_file", "remove_worktree"], max_per_hour=30),
    _r("quarantine-unknown-file", "unknown_file", ["quarantine_file"], max_per_hour=100),
    _r("close-zombie", "zombie_ticket", ["stop_agent", "close_dead_ticket"], max_per_hour=20, max_per_ticket=1),
    _r("break-wait-cycle", "wait_cycle", ["requeue_ticket", "drop_label", "escalate"], 3, max_per_hour=50, max_per_ticket=3),
    _r("escalate-same-commit", "same_commit_repush", ["stop_agent", "escalate"], max_per_hour=20),
    _r("alert-dispatch-frozen", "dispatch_frozen", ["notify"]),
    _r("alert-pool-saturated", "pool_saturated", ["notify"]),
    _r("alert-no-closes", "no_closes", ["notify"]),
    _r("pause-on-red-main", "main_red", ["notify", "pause_dispatch"]),
    _r("alert-supervisor-silent", "supervisor_silent", ["notify"]),
    _r("alert-spend-rate", "spend_rate", ["notify"]),
    # adopted loops (docs/adopt.md): a snapshot of the worktree first; a stop only where the rule says allow_stop
    _r("alert-adopted-idle", "adopted_idle", ["notify", "snapshot_worktree"]),
    _r("stop-adopted-stuck", "adopted_stuck", ["notify", "snapshot_worktree", "stop_adopted"], max_per_hour=20),
    _r("stop-adopted-cost", "adopted_cost", ["notify", "snapshot_worktree", "stop_adopted"], max_per_hour=20),
    _r("stop-adopted-iterations", "adopted_iterations", ["notify", "snapshot_worktree", "stop_adopted"], max_per_hour=20),
    _r("alert-adopted-no-progress", "adopted_no_progress", ["notify", "snapshot_worktree"]),
    _r("alert-adopted-cycle", "adopted_cycle", ["notify", "snapshot_worktree"]),
    _r("stop-adopted-procs", "adopted_procs", ["notify", "snapshot_worktree", "stop_adopted"], max_per_hour=20),
    _r("stop-adopted-memory", "adopted_memory", ["notify", "snapshot_worktree", "stop_adopted"], max_per_hour=20),
    _r("alert-adopted-same-failure", "adopted_same_failure", ["notify", "snapshot_worktree"]),
    # a loop that ended by itself (killed, crashed, done): a page, and what it left uncommitted kept in a ref
    _r("alert-adopted-gone", "adopted_gone", ["notify", "snapshot_worktree"]),
)
assert {r.when for r in DEFAULT_RULES} == set(FINDINGS)


def select(policy, kind: str, labels=()) -> Rule | None:
    """The rule in force for one finding: the first policy rule for `kind` whose `labels` meet the
    finding's labels, else the first policy rule for `kind` without labels, else the default.

    A rule for one label never replaces the rule for the others (a `to-review` rule leaves `wip` alone)."""
    have = set(labels)
    plain = None
    for r in policy.rules:
        if r.when != kind:
            continue
        if r.labels:
            if have.intersection(r.labels):
                return r
        elif plain is None:
            plain = r
    if plain is not None:
        return plain
    return next((r for r in DEFAULT_RULES if r.when == kind), None)


def effective(policy) -> dict[str, Rule]:
    """finding kind -> the rule in force (first policy rule for that kind, else the default)."""
    out: dict[str, Rule] = {r.when: r for r in DEFAULT_RULES}
    seen: set[str] = set()
    for r in policy.rules:
        if r.when not in seen and not r.labels:
            out[r.when] = r
            seen.add(r.when)
    return out


def inapplicable(rule: Rule) -> list[tuple[int, str]]:
    """(index in do, action) of every step that cannot apply to rule.when."""
    ok = APPLICABLE.get(rule.when, frozenset())
    return [(i, a) for i, a in enumerate(rule.do) if a not in ok]
