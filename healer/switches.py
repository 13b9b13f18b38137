"""Product switches: named healer features a game day may switch off, to prove its scenario can fail.

    HEALER_SWITCHES_OFF="intent_recovery,busy_check"

A game day's `disable: {switches_off: [NAME]}` turns one feature off in the product
itself, in this process and in every child it starts (supervisor ticks, the dispatcher),
so the scenario that exercises the feature must go red for the right reason. Unset, every
switch is on and a check is one dict lookup. Like failpoints, they exist for this purpose
only; `healer gameday list --switches` prints them.
"""

from __future__ import annotations

import os

ENV = "HEALER_SWITCHES_OFF"

# name -> what switching it off does (the feature it removes)
SWITCHES: dict[str, str] = {
    "host_takeback": "a dispatcher restarted under a new host id no longer takes back what its earlier id ran on this "
                     "machine (healer.fleet.dispatch_reap.Reaper.take_back does nothing): those agents stay `running` "
                     "under a host id nobody dispatches as, their tickets in progress",
    "intent_recovery": "the supervisor no longer finishes or rolls back half-done intents after a crash "
                       "(healer.remedy.actions.recover is a no-op)",
    "busy_check": "a worktree is removed even while a process has its cwd or an open file inside "
                  "(healer.procs.busy_pids finds nothing)",
    "quarantine": "nothing is moved into quarantine (healer.quarantine.quarantine_many moves nothing): unknown "
                  "files stay where they are, and a worktree removal takes them with it",
    "move_cas": "the dispatcher moves tickets without its compare-and-set (healer.fleet.dispatch_board.TicketMover.move "
                "drops `expect`, and dispatch_merge.Merger.unwanted no longer looks before a merge): a ticket someone else "
                "moved meanwhile is moved again, or merged",
    "merge_tx": "a merge's store writes are no longer one transaction (healer.fleet.dispatch_merge.Merger.review commits "
                "the proposal's verdict before the ticket's move to done): a connection lost between them leaves a "
                "review ticket whose proposal is merged, which the supervisor judges a zombie",
    "fail_open": "in doubt, main blocks (healer.fleet.dispatch_merge.Merger.check_main reads a main gate that cannot "
                 "decide as red): the dispatcher pauses and pages on a gate that timed out or could not start",
    "infra_endings": "the dispatcher no longer reads an attempt's end as the infrastructure's (healer.fleet.dispatch_reap."
                     "ending_of answers `agent`): a store or model endpoint that was away is charged to the agent, "
                     "counted by the launch budget and the escalations",
}
# Features decided in the pure core are switched off through the policy instead (the core reads no environment):
# a rule in `disable: {rules: [...]}` (e.g. wait_cycle -> notify only), `actions_off`, `fleet.wait_labels: []`,
# `fleet.pause_on_red_main: false`, a threshold.

_cache: tuple[str, frozenset[str]] | None = None


def off() -> frozenset[str]:
    global _cache
    raw = os.environ.get(ENV, "")
    if _cache is None or _cache[0] != raw:
        _cache = (raw, frozenset(x.strip() for x in raw.split(",") if x.strip()))
    return _cache[1]


def enabled(name: str) -> bool:
    """True unless the game day switched `name` off (an unknown name is a programming error)."""
    if name not in SWITCHES:
        raise KeyError(f"unknown product switch {name!r}")
    return name not in off()


def env_value(names: list[str] | tuple[str, ...]) -> str:
    return ",".join(sorted(set(names)))
