"""The dispatcher's step decisions, pure: main's status, each proposal in review, an ended agent's attempt and its
ticket, an in-progress ticket without a live agent.

`healer.core.dispatch.decide` plans a pass's launches and stops; these decide the steps before it. Both are called
from one place, the pass's program (healer/core/dispatch_pass.py `decide`), whose steps the shell's collaborators
(healer/fleet/dispatch_merge.py `Merger`, dispatch_reap.py `Reaper`, …) answer and carry out, in order, as the
supervisor's shell does with healer/core/plan.py's decision. One exception, on purpose: `close_move` is judged by the
Reaper inside the transaction that closes the attempt, on the ticket re-read there (a move made meanwhile stands).

Theory of operation:
- main: the gates run on main's commit when it has gates, a commit, and is not already green on that very commit
  (`main_step`); their verdict gives main's colour and what a change of colour does (`main_decided`, with
  healer/core/fleet.py `main_changed`). A gate that cannot decide blocks (`fail`) unless the game day's
  `fail_open` switch is off, which the shell reads and passes in: the core reads no environment.
- proposals: a ticket in review without a proposal gets one from its branch, or goes back to the queue without one;
  a merged proposal whose ticket is not done yet is finished (a recording cut short); an open one is gated; the
  gates' verdict is withheld (decided elsewhere meanwhile: rejected), deferred, or decided (`review_step`,
  `verdict_step`, `verdict_events`). Right before main advances the proposal must still be wanted (`unwanted`).
- reaping: an ended agent's attempt gets its exit code, failure signature, gate-log tail and ending
  (`attempt_end`), and its ticket moves only while it is still in progress under that very attempt (`close_move`).
- orphans: an in-progress ticket with no live agent is this host's to adopt or requeue unless another host claims it
  (`orphan_candidate`, then healer/core/fleet.py `owns_orphan`).

No I/O, no clock: `now` is an input.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from healer import conventions as cv
from healer import lifecycle
from healer.core import dispatch as core
from healer.core import endings
from healer.core import fleet as fleet_rules  # its main_changed is looked up at each call (a mutation test swaps it)
from healer.core.fleet import GREEN, UNKNOWN, Effect

PASS, FAIL = "pass", "fail"  # a gate's verdicts (healer/fleet/gates.py), besides UNKNOWN

# -- main's status ----------------------------------------------------------------------


@dataclass(frozen=True)
class MainView:
    """What the shell gathered about main before its gates run."""

    prev: str  # main's colour as last recorded (green | red | unknown)
    head: str | None  # main's commit now (None: the branch is not there)
    checked: str | None  # the commit main's gates last ran on
    has_gates: bool  # fleet.main_gates is not empty


@dataclass(frozen=True)
class MainStep:
    run_gates: bool  # run main's gates on view.head
    status: str | None = None  # nothing to run and nothing to record: main is this (green on a commit already checked)
    verdict: str | None = None  # the verdict without gates (no gates: pass; no branch: unknown)
    log: str = ""


def main_step(v: MainView, branch: str) -> MainStep:
    """Whether main's gates run now, or the verdict without them."""
    if not v.has_gates:
        return MainStep(False, verdict=PASS)
    if v.head == v.checked and v.prev == GREEN:
        return MainStep(False, status=GREEN)  # the gates already passed on this very commit
    if v.head is None:
        return MainStep(False, verdict=UNKNOWN, log=f"branch {branch} does not exist")
    return MainStep(True)


def gate_verdict(outcome: str, *, fail_open: bool = True) -> str:
    """Main's gates' outcome as main's verdict: one that cannot decide blocks (the `fail_open` switch off: a game
    day's --disable only, healer/switches.py)."""
    return FAIL if outcome == UNKNOWN and not fail_open else outcome


def main_decided(v: MainView, verdict: str, log: str, *, now: float, branch: str, paused: bool,
                 paused_reason: str | None, red_since: float | None, pause_on_red: bool) -> tuple[str, list[Effect]]:
    """Main's colour after `verdict`, and the effects: the commit checked (written when it changed: red runs the
    gates every pass, the same commit is not written again), then what a change of colour does."""
    status = fleet_rules.main_status(v.prev, verdict, v.has_gates)
    out = [Effect("set", cv.MAIN_CHECKED, v.head)] if v.head != v.checked else []
    out += fleet_rules.main_changed(v.prev, status, now=now, branch=branch, head=v.head, log=log, paused=paused,
                                    paused_reason=paused_reason, red_since=red_since, pause_on_red=pause_on_red)
    return status, out


# -- proposals --------------------------------------------------------------------------

REQUEUE = "requeue"  # in review with neither a proposal nor a branch: back to the queue
PROPOSE = "propose"  # in review without a proposal: open one from the branch's head
FINISH = "finish"  # its proposal was merged, the ticket not done yet (a recording cut short): done now
GATE = "gate"  # its proposal is open: gate it and merge or reject it
NOTHING = "nothing"  # its proposal was decided (rejected, withheld): the plan replays or stops it

WITHHELD, DEFERRED, DECIDE = "withheld", "deferred", "decide"  # what a gate verdict's outcome asks of the shell


def review_step(last_state: str | None, head: str | None = None) -> str:
    """What a ticket in review needs now, from its last proposal's state (None: it has none; then `head` is its
    worktree's or branch's commit, if any)."""
    if last_state is None:
        return PROPOSE if head else REQUEUE
    if last_state == "merged":
        return FINISH
    return GATE if last_state == "open" else NOTHING


def verdict_step(outcome: str) -> str:
    """A proposal's gate outcome: `withheld` (decided elsewhere while the gates ran: that first verdict stands, the
    proposal is recorded rejected), `deferred` (no verdict this pass: gated again next pass), else `decide`."""
    if outcome == "withheld":
        return WITHHELD
    if outcome == "deferred":
        return DEFERRED
    return DECIDE


def verdict_events(tid: str, proposal: int, commit: str, outcome: str, log: str, *,
                   conflict: Mapping[str, Any] | None = None, guarded: str | None = None) -> list[Effect]:
    """The events a verdict records beside the proposal's own: why it was withheld or deferred (the log's last
    line), a merge conflict's files and commits, what its commits change that is never a proposal's."""
    step = verdict_step(outcome)
    if step == WITHHELD:
        return [Effect("event", "proposal.withheld", tid, {"proposal": proposal, "why": log.splitlines()[-1:]})]
    if step == DEFERRED:
        return [Effect("event", "proposal.deferred", tid, {"proposal": proposal, "why": log.splitlines()[-1:]})]
    out = []
    if conflict is not None:
        out.append(Effect("event", "proposal.conflict", tid, {"proposal": proposal, "main": conflict.get("main"),
                                                               "files": conflict.get("files"), "with": conflict.get("with")}))
    if guarded is not None:
        out.append(Effect("event", "proposal.guarded_change", tid, {"proposal": proposal, "commit": commit,
                                                                    "why": guarded}))
    return out


def unwanted(tid: str, proposal: int, ticket_state: str, proposal_state: str | None) -> str | None:
    """Why a proposal may no longer be merged (the compare-and-set right before main advances), or None: its ticket
    must still be in review and the proposal still open."""
    if ticket_state != lifecycle.REVIEW:
        return f"{tid} moved to {ticket_state} while its merge gates ran"
    if proposal_state != "open":
        return f"proposal {proposal} is {proposal_state or 'gone'} now"
    return None


# -- reaping ----------------------------------------------------------------------------


@dataclass(frozen=True)
class AttemptEnd:
    """How an ended agent's attempt is closed."""

    exit_code: int | None
    signature: str | None  # None: a clean run
    ending: endings.Ending
    tail: str  # the gate-log tail recorded with it


STOP_RECLAIMED = "stop_reclaimed"  # this host was given up and the ticket requeued: its agent works for nobody now
CLOSE = "close"  # an ended agent (recorded by someone else) still owes its attempt


def ended_code(state: str, exit_code: int | None) -> tuple[bool, int | None]:
    """Whether the runtime's view of an agent (`state`: running, paused, exited, gone, unknown) says it ended, and
    with which exit code (None: it vanished without one). A runtime that cannot tell is not an ending (fail-open)."""
    if state == "exited":
        return True, exit_code
    return state == "gone", None


def to_reap(launched_here: bool, reaped_by: str | None, stopped_here: bool, reaped: bool) -> str | None:
    """An agent of this host that someone else already recorded as ended (the supervisor's bookkeeping): stopped here
    when another host reclaimed its ticket (`reaped_by`, once), else its attempt closed here (once)."""
    if not launched_here:
        return None
    if reaped_by and not stopped_here:
        return STOP_RECLAIMED
    return CLOSE if not reaped else None


def lease_held(holder: str, expires_at: float, now: float, fenced_prefix: str) -> bool:
    """A host lease someone holds now, pid aside (the shell asks the process table): not expired and not fenced."""
    return not holder.startswith(fenced_prefix) and expires_at > now


def died_holding(before: str | None, me: str, fenced_prefix: str) -> bool:
    """The lease's holder before this pass took it (`before`) never released it: it died (SIGKILL, a host crash), and
    agents that vanished with it were interrupted. Not when it was this very dispatcher, or a holder the leading
    supervisor fenced (a host given up, healer/core/hosts.py)."""
    return before is not None and before != me and not before.startswith(fenced_prefix)


def ending_of(code: int | None, res: Mapping[str, Any] | None, log_tail: str, sig: str | None, *,
              infra_endings: bool = True) -> endings.Ending:
    """How a reaped agent's attempt ended (healer/core/endings.py): with a result file, the runner's own `cause`
    says it; without one (it could not write it, or never got that far), its last `healer:` line does.
    `infra_endings` off (a game day proving they matter, chaos: model-endpoint-down): every failure is the agent's."""
    if not infra_endings:
        return endings.classify(code) if code in (0, None) else endings.Ending(endings.AGENT, None, "")
    if sig and sig.startswith(core.INTERRUPTED):
        return endings.classify(code, text=sig, interrupted=True)
    if res is not None:
        reason = str(res.get("reason") or "")
        cause = res.get("cause")
        e = endings.classify(code, cause=cause if isinstance(cause, str) else None)
        return endings.Ending(e.kind, e.cause, reason) if e.infra else e
    return endings.classify(code, text=endings.runner_words(None, log_tail))


def tail_text(v: Any) -> str:
    if isinstance(v, list):
        return "\n".join(str(x) for x in v)
    return str(v) if v else ""


def attempt_end(code: int | None, res: Mapping[str, Any] | None, log_tail: str, *, stopped: bool, launcher_died: bool,
                infra_endings: bool = True) -> AttemptEnd:
    """An ended agent's attempt from what the runtime saw (`code`: None when the process vanished), the loop's result
    file (`res`, None when it wrote none) and its log's tail. A result's exit code stands in for a missing one; the
    loop's own failure signature beats the exit code's; an agent that vanished while healer was down is
    interrupted; an infrastructure ending gets its own signature (counted by no budget, healer/core/endings.py)."""
    if code is None and res is not None and isinstance(res.get("exit_code"), int):
        code = res["exit_code"]
    sig = (res or {}).get("failure_signature") or fleet_rules.signature(code)
    sig = core.interrupted_signature(code, stopped=stopped, launcher_died=launcher_died) or sig
    if code == 0:
        sig = None
    tail = tail_text((res or {}).get("gate_log_tail")) or log_tail
    ending = ending_of(code, res, log_tail, sig, infra_endings=infra_endings)
    if ending.infra and ending.cause != endings.HOST_EVENT:  # (an interrupted one keeps its own signature)
        sig = ending.signature()
    return AttemptEnd(code, sig, ending, tail)


def close_move(ticket_state: str, attempt: int | None, last_attempt: int | None, agent_id: str, code: int | None,
               head: str | None, sig: str | None) -> fleet_rules.ExitMove | None:
    """Where the ticket of an ended agent goes (healer/core/fleet.py `exit_move`), or None: it is not in progress any
    more (a human or the supervisor took it elsewhere: respected), or a later attempt (requeued meanwhile, maybe on
    another host) owns it now."""
    if ticket_state != lifecycle.IN_PROGRESS:
        return None
    if attempt is not None and last_attempt is not None and last_attempt != attempt:
        return None
    return fleet_rules.exit_move(agent_id, code, head, sig)


ORPHAN_SIGNATURE = f"{core.INTERRUPTED}: no agent registered (its dispatcher died mid-launch)"


def orphan_candidate(live: bool, claim_host: str | None, me: str, shared: bool) -> bool:
    """May an in-progress ticket be this host's orphan? Not while an agent runs on it, nor (several hosts) while
    another host's claim holds it (`claim_host`: the host its data names, `me` when it names none): its launch may
    be in flight; its dispatcher, or the supervisor once that host is lost, judges it. Whether it is the
    dispatcher's at all is `owns_orphan` (healer/core/fleet.py)."""
    if live:
        return False
    return not (shared and claim_host != me)
