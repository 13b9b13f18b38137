"""Checkers: properties of a whole game-day history (Jepsen style), checked after the run.

Input is a `History`: every event of the run (the store's append-only log), the final
state (tickets, intents, leases) and the engine's own observations (`extra`: files
before/after, quarantine contents, stopped processes, leftovers). Each expectation of
a scenario yields one `Check` whose message names the expectation when it breaks.

Ticket state paths are subsequences: `[queued, in_progress, needs_human]` holds when
the ticket passed through those states in that order (other states may sit between)
and ended in the last one.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chaos import invariants as inv
from chaos.faults.command import probe
from chaos.scenario import match, seconds
from chaos.scenario_parts import INVARIANT_NAMES, Checker
from healer.records import Event, Intent, Ticket


@dataclass
class History:
    events: list[Event]
    tickets: dict[str, Ticket] = field(default_factory=dict)
    intents: list[Intent] = field(default_factory=list)
    start: float = 0.0
    end: float = 0.0
    cooldown: float = 4 * 3600.0
    extra: dict[str, Any] = field(default_factory=dict)

    def of(self, kind: str | None = None, subject: str | None = None, payload: dict | None = None,
           since: float | None = None, until: float | None = None) -> list[Event]:
        out = []
        for e in self.events:
            if kind is not None and not (any(match(k, e.kind) for k in kind) if isinstance(kind, list) else match(kind, e.kind)):
                continue
            if not match(subject, e.subject):
                continue
            if payload and not _payload_has(e.payload, payload):
                continue
            if since is not None and e.at < since:
                continue
            if until is not None and e.at > until:
                continue
            out.append(e)
        return out


def _payload_has(got: Any, want: Any) -> bool:
    """Payload filter: mappings match key by key (nested), a string is a glob on a string, else equality."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got or v is None for k, v in want.items()) and all(
            _payload_has(got.get(k), v) for k, v in want.items())
    if isinstance(want, str) and isinstance(got, str):
        return match(want, got)
    return got == want


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    message: str
    kind: str = ""

    def line(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'} {self.name}: {self.message}"


def run_checks(expect: list[Checker], h: History) -> list[Check]:
    out = []
    for c in expect:
        fn = CHECKERS[c.kind]
        try:
            ok, msg = fn(c.spec, h)
        except (KeyError, ValueError, TypeError) as e:
            ok, msg = False, f"checker could not run: {type(e).__name__}: {e}"
        out.append(Check(c.title, ok, msg if ok else f"expectation '{c.title}' broken: {msg}", c.kind))
    return out


# -- bounds ---------------------------------------------------------------------
def _bounds(spec: dict, n: int, what: str) -> tuple[bool, str]:
    if "equals" in spec and n != int(spec["equals"]):
        return False, f"{what}: expected exactly {spec['equals']}, got {n}"
    if "min" in spec and n < int(spec["min"]):
        return False, f"{what}: expected at least {spec['min']}, got {n}"
    if "max" in spec and n > int(spec["max"]):
        return False, f"{what}: expected at most {spec['max']}, got {n}"
    return True, f"{what}: {n}"


# -- ticket paths ---------------------------------------------------------------
def state_paths(h: History) -> dict[str, list[str]]:
    paths: dict[str, list[str]] = {}
    for e in h.events:
        if e.kind == "ticket.created":
            paths[e.subject] = [e.payload.get("state", "queued")]
        elif e.kind == "ticket.moved":
            p = paths.setdefault(e.subject, [e.payload.get("from", "?")])
            p.append(e.payload["to"])
    return paths


def _subsequence(want: list[str], got: list[str]) -> bool:
    it = iter(got)
    return all(any(s == g for g in it) for s in want)


def check_ticket_states(spec: dict[str, list[str]], h: History) -> tuple[bool, str]:
    paths = state_paths(h)
    bad, seen = [], 0
    for pattern, want in spec.items():
        ids = [t for t in sorted(set(paths) | set(h.tickets)) if match(pattern, t)]
        if not ids:
            bad.append(f"no ticket matches {pattern}")
            continue
        for tid in ids:
            seen += 1
            got = paths.get(tid, [h.tickets[tid].state] if tid in h.tickets else [])
            final = h.tickets[tid].state if tid in h.tickets else (got[-1] if got else "?")
            if not _subsequence(want, got) or final != want[-1]:
                shown = got if len(got) <= 8 else [*got[:3], f"…({len(got) - 6} more)…", *got[-3:]]
                bad.append(f"{tid} went {' -> '.join(shown) or 'nowhere'} (final {final}), expected {' -> '.join(want)}")
    if bad:
        more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
        return False, "; ".join(bad[:3]) + more
    return True, f"{seen} ticket path(s) as expected"


def check_tickets(spec: dict, h: History) -> tuple[bool, str]:
    """{match: "F-*", state: queued|[...], not_state: in_progress, min/max/equals}: count final tickets."""
    states = spec.get("state")
    states = [states] if isinstance(states, str) else states
    not_states = spec.get("not_state")
    not_states = [not_states] if isinstance(not_states, str) else not_states
    n = 0
    for t in h.tickets.values():
        if not match(spec.get("match"), t.id):
            continue
        if states and t.state not in states:
            continue
        if not_states and t.state in not_states:
            continue
        n += 1
    return _bounds(spec, n, f"tickets {spec.get('match', '*')} in {states or 'any state'}" + (f" not in {not_states}" if not_states else ""))


# -- counting events --------------------------------------------------------------
def _select(spec: dict, h: History, since: float | None = None, until: float | None = None) -> list[Event]:
    return h.of(spec["kind"], spec.get("subject"), spec.get("payload"), since, until)


def _k(spec: dict) -> str:
    k = spec["kind"]
    return "|".join(k) if isinstance(k, list) else k


def check_count(spec: dict, h: History) -> tuple[bool, str]:
    if spec.get("per_tick"):
        ticks = [e.id for e in h.events if e.kind == "supervisor.tick"]
        per = Counter(bisect.bisect_left(ticks, e.id) for e in _select(spec, h))
        tick, n = max(per.items(), key=lambda kv: (kv[1], -kv[0]), default=(0, 0))
        ok, msg = _bounds(spec, n, f"{_k(spec)} events in one supervisor tick")
        return ok, msg + (f" (the most, in tick {tick + 1} of {len(ticks)})" if per else "")
    if spec.get("per_day"):
        days = Counter(time.strftime("%Y-%m-%d", time.gmtime(e.at)) for e in _select(spec, h))
        day, n = max(days.items(), key=lambda kv: (kv[1], kv[0]), default=("-", 0))
        ok, msg = _bounds(spec, n, f"{_k(spec)} events in one UTC day")
        return ok, msg + (f" (the most, on {day}; {len(days)} day(s) with any)" if days else "")
    n = len(_select(spec, h))
    about = f"{_k(spec)} events" + (f" about {spec['subject']}" if spec.get("subject") else "")
    if not spec.get("payload"):
        return _bounds(spec, n, about)
    # say the payload filter, and what it left out: "got 0" beside 7 such events in the timeline is no riddle then
    ok, msg = _bounds(spec, n, f"{about} with payload {_flow(spec['payload'])}")
    if not ok:
        unfiltered = len(_select({k: v for k, v in spec.items() if k != "payload"}, h))
        msg += f" ({unfiltered} {_k(spec)}" + (f" about {spec['subject']}" if spec.get("subject") else "") + \
            " without the filter)"
    return ok, msg


def _what(spec: dict) -> str:
    """The events a spec selects, as the scenario wrote them: `ticket.moved about S-1 with payload {to: needs_human}`."""
    out = _k(spec) + (f" about {spec['subject']}" if spec.get("subject") else "")
    return out + (f" with payload {_flow(spec['payload'])}" if spec.get("payload") else "")


def _flow(v: Any) -> str:
    """A payload filter as the scenario writes it: {to: needs_human}."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_flow(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_flow(x) for x in v) + "]"
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def check_event(spec: dict, h: History) -> tuple[bool, str]:
    return check_count({"min": 1, **spec}, h)


def check_never(spec: dict, h: History) -> tuple[bool, str]:
    evs = _select(spec, h)
    if evs:
        e = evs[0]
        return False, f"{len(evs)} {_what(spec)} event(s), the first at +{e.at - h.start:.0f}s about {e.subject or '-'}"
    return True, f"no {_what(spec)} event"


def _first(spec: dict, h: History) -> Event | None:
    evs = _select(spec, h)
    return evs[0] if evs else None


def check_never_after(spec: dict, h: History) -> tuple[bool, str]:
    """{after: {kind, subject, payload}, never: {kind, subject}, until?: {kind...}}: nothing between the anchors."""
    anchor = _first(spec["after"], h)
    if anchor is None:
        return False, f"the anchor event {_what(spec['after'])} never happened"
    stop = None
    if spec.get("until"):
        stop = next((e for e in _select(spec["until"], h) if e.id > anchor.id), None)
    later = [e for e in _select(spec["never"], h) if e.id > anchor.id and (stop is None or e.id < stop.id)]
    if later:
        return False, f"{len(later)} {_k(spec['never'])} event(s) after {anchor.kind} at +{anchor.at - h.start:.0f}s"
    return True, f"no {_k(spec['never'])} after {anchor.kind} (+{anchor.at - h.start:.0f}s)"


def check_within(spec: dict, h: History) -> tuple[bool, str]:
    """{kind, subject?, payload?, after?: {kind...} (default: the start), max: 1h, min?: 0s}."""
    t0 = h.start
    anchor_id = 0
    if spec.get("after"):
        a = _first(spec["after"], h)
        if a is None:
            return False, f"the anchor event {_what(spec['after'])} never happened"
        t0, anchor_id = a.at, a.id
    evs = [e for e in _select(spec, h) if e.id > anchor_id]
    if not evs:
        unfiltered = len(_select({k: v for k, v in spec.items() if k != "payload"}, h)) if spec.get("payload") else 0
        return False, (f"no {_what(spec)} event after the anchor (wanted within {spec.get('max')})"
                       + (f"; {unfiltered} without the payload filter" if unfiltered else ""))
    dt = evs[0].at - t0
    if "max" in spec and dt > seconds(spec["max"]):
        return False, f"first {_what(spec)} came {dt:.0f}s after the anchor, expected within {seconds(spec['max']):.0f}s"
    if "min" in spec and dt < seconds(spec["min"]):
        return False, f"first {_what(spec)} came {dt:.0f}s after the anchor, expected no sooner than {seconds(spec['min']):.0f}s"
    return True, f"first {_what(spec)} {dt:.0f}s after the anchor"


def check_gaps(spec: dict, h: History) -> tuple[bool, str]:
    """{kind, subject, min: [5m, 10m, ...]}: the i-th gap between consecutive events is at least min[i] (backoff)."""
    evs = _select(spec, h)
    mins = [seconds(x) for x in spec.get("min", [])]
    maxs = [seconds(x) for x in spec.get("max", [])]
    if len(evs) < 2:
        return (False, f"only {len(evs)} {_k(spec)} event(s), no gap to measure") if spec.get("require", True) else (True, "no gaps")
    bad = []
    gaps = []
    for i in range(1, len(evs)):
        gap = evs[i].at - evs[i - 1].at
        gaps.append(gap)
        need = mins[min(i - 1, len(mins) - 1)] if mins else 0.0
        cap = maxs[min(i - 1, len(maxs) - 1)] if maxs else float("inf")
        if gap + 1e-6 < need:
            bad.append(f"gap {i} was {gap:.0f}s, expected at least {need:.0f}s")
        elif gap - 1e-6 > cap:
            bad.append(f"gap {i} was {gap:.0f}s, expected at most {cap:.0f}s")
    shown = ", ".join(f"{g:.0f}s" for g in gaps[:8]) + (" …" if len(gaps) > 8 else "")
    if bad:
        return False, "; ".join(bad[:3]) + f" (gaps: {shown})"
    return True, f"{len(evs) - 1} gap(s) within bounds: {shown}"


def check_labels(spec: dict, h: History) -> tuple[bool, str]:
    """{match, label, present: false, min/max/equals (count of tickets carrying it)}."""
    carrying = [t.id for t in h.tickets.values() if match(spec.get("match"), t.id) and spec["label"] in t.labels]
    if "present" in spec:
        if spec["present"] is False and carrying:
            return False, f"{len(carrying)} ticket(s) still carry '{spec['label']}': {', '.join(carrying[:5])}"
        if spec["present"] is True and not carrying:
            return False, f"no ticket carries '{spec['label']}'"
    return _bounds(spec, len(carrying), f"tickets labelled '{spec['label']}'")


def check_notifications(spec: dict, h: History) -> tuple[bool, str]:
    """{key (glob), max_per_window: 1, window: 4h, min?, max?}. The scenario states the window: a check that
    borrowed the policy's cooldown could not fail when the cooldown is what is broken."""
    window = seconds(spec["window"]) if "window" in spec else h.cooldown  # the invariant's own quota: the cooldown
    sent = h.of("notify.sent", spec.get("key"))
    per_key: dict[str, list[float]] = defaultdict(list)
    for e in sent:  # across_keys: one condition paged under several keys is still one condition
        per_key[spec.get("key") or "*" if spec.get("across_keys") else e.subject].append(e.at)
    cap = int(spec.get("max_per_window", 1))
    for key, times in per_key.items():
        j = 0
        for i in range(len(times)):
            while j < i and times[i] - times[j] >= window:
                j += 1
            if i - j + 1 > cap:
                return False, f"{i - j + 1} notifications for '{key}' within {window:.0f}s, expected at most {cap}"
    ok, msg = _bounds(spec, len(sent), f"notifications for {spec.get('key', '*')}")
    if not ok:
        return ok, msg
    return True, f"{len(sent)} notification(s) over {len(per_key)} key(s), at most {cap} per {window:.0f}s window"


def check_files(spec: dict, h: History) -> tuple[bool, str]:
    """{absent: [paths], present: [paths], quarantined: N (min), restorable: true}."""
    after = h.extra.get("files_after", {})
    quarantine = h.extra.get("quarantined", {})
    for p in spec.get("absent", []):
        if p in after:
            return False, f"{p} is still there"
    for p in spec.get("present", []):
        if p not in after:
            return False, f"{p} is gone"
    if "quarantined" in spec and len(quarantine) < int(spec["quarantined"]):
        return False, f"{len(quarantine)} file(s) in quarantine, expected at least {spec['quarantined']}"
    if spec.get("restorable"):
        restored = h.extra.get("restored", {})
        bad = [p for p, ok in restored.items() if not ok]
        if not restored:
            return False, "nothing was restored from quarantine"
        if bad:
            return False, f"not restored byte for byte: {', '.join(bad[:5])}"
    return True, "files as expected"


def check_state(spec: dict, h: History) -> tuple[bool, str]:
    """{key: value} over engine observations (h.extra), e.g. {dispatch_paused: false}."""
    for k, want in spec.items():
        got = h.extra.get(k)
        if got != want:
            return False, f"{k} is {got!r}, expected {want!r}"
    return True, ", ".join(f"{k}={v!r}" for k, v in spec.items())


# -- invariants -----------------------------------------------------------------
def inv_one_live_agent_per_ticket(h: History) -> tuple[bool, str]:
    """Never two live agents on one ticket. Uses the engine's process truth (chaos.proc.*) when present,
    else the agent records (agent.registered / agent.ended)."""
    truth = any(e.kind == "chaos.proc.started" for e in h.events)
    start, end = ("chaos.proc.started", "chaos.proc.ended") if truth else ("agent.registered", "agent.ended")
    live: dict[str, set[str]] = defaultdict(set)
    owner: dict[str, str] = {}
    for e in h.events:
        if e.kind == start:
            t = e.payload.get("ticket")
            if not t:
                continue
            owner[e.subject] = t
            live[t].add(e.subject)
            if len(live[t]) > 1:
                return False, f"{len(live[t])} live agents on {t} at +{e.at - h.start:.0f}s: {', '.join(sorted(live[t]))}"
        elif e.kind == end and e.subject in owner:
            live[owner[e.subject]].discard(e.subject)
    return True, f"at most one live agent per ticket ({len(owner)} agents, {'process truth' if truth else 'agent records'})"


def inv_no_user_file_deleted(h: History) -> tuple[bool, str]:
    before: dict[str, str] = h.extra.get("files_before", {})
    after: dict[str, str] = h.extra.get("files_after", {})
    kept = set(h.extra.get("quarantined", {}).values())
    lost = [p for p, digest in before.items() if p not in after and digest not in kept]
    if lost:
        return False, f"{len(lost)} user file(s) deleted and not in quarantine: {', '.join(sorted(lost)[:5])}"
    return True, f"{len(before)} user file(s) kept or quarantined"


def inv_intents_settled(h: History) -> tuple[bool, str]:
    open_ = [i for i in h.intents if i.state not in ("done", "aborted")]
    if open_:
        i = open_[0]
        # a supervisor killed with intents in flight recovers them at its next tick: a run that ends before any
        # tick came after the crash cannot judge them yet (a generated schedule's crash in its last minute)
        crashes = [e for e in h.events if e.kind == "chaos.crash" and e.subject == "supervisor"]
        if crashes and not any(e.kind == "supervisor.tick" and e.id > crashes[-1].id for e in h.events):
            return True, (f"{len(open_)} intent(s) in flight when the supervisor was killed "
                          f"at +{crashes[-1].at - h.start:.0f}s, with no tick after it before the end: not yet judged")
        return False, f"{len(open_)} intent(s) left {i.state}, e.g. #{i.id} {i.action} {i.subject}"
    return True, f"{len(h.intents)} intent(s), every one done or aborted"


def inv_one_lease_holder(h: History) -> tuple[bool, str]:
    holder: dict[str, str | None] = {}
    for e in h.events:
        if e.kind == "lease.acquired":
            cur = holder.get(e.subject)
            if cur and cur != e.payload.get("holder"):
                return False, f"lease {e.subject} acquired by {e.payload.get('holder')} while {cur} held it"
            holder[e.subject] = e.payload.get("holder")
        elif e.kind == "lease.taken_over":
            if not (e.payload.get("expired") or e.payload.get("holder_dead")):
                return False, f"lease {e.subject} taken from a live holder {e.payload.get('from')}"
            holder[e.subject] = e.payload.get("to")
        elif e.kind == "lease.released":
            holder[e.subject] = None
    return True, f"one holder at a time on {len(holder)} lease(s)"


def inv_notifications_within_quota(h: History) -> tuple[bool, str]:
    return check_notifications({"max_per_window": 1}, h)


def inv_no_leftovers(h: History) -> tuple[bool, str]:
    left = h.extra.get("leftovers", [])
    if left:
        return False, f"{len(left)} leftover(s): {', '.join(map(str, left[:5]))}"
    return True, "no stopped process, lock or fault state left behind"


def inv_no_corpse(h: History) -> tuple[bool, str]:
    corpses = h.extra.get("corpses", [])
    if corpses:
        return False, f"{len(corpses)} process(es) still alive: {', '.join(map(str, corpses[:5]))}"
    return True, "no process left alive"


def inv_never_merged_broken(h: History) -> tuple[bool, str]:
    broken = {e.subject for e in h.events if e.kind == "chaos.fault" and e.payload.get("fault") == "broken_proposal"}
    broken |= set(h.extra.get("broken_tickets", []))
    since: dict[str, float] = h.extra.get("broken_since", {})  # work merged before it was broken was not broken
    merged = [e.subject for e in h.events if e.kind == "proposal.merged" and e.subject in broken
              and e.at >= since.get(e.subject, float("-inf"))]
    if merged:
        return False, f"a broken proposal was merged: {', '.join(merged)}"
    return True, "no broken proposal merged"


def inv_no_double_effect(h: History) -> tuple[bool, str]:
    """No effect applied twice: a label dropped twice without being added back in between, a worktree
    removed twice, a file quarantined twice (crash recovery must finish an action, never repeat it)."""
    dropped: dict[tuple[str, str], int] = defaultdict(int)
    removed: dict[str, int] = defaultdict(int)
    for e in h.events:
        key = (e.subject, str(e.payload.get("label")))
        if e.kind == "ticket.labeled":
            dropped[key] = 0
        elif e.kind == "ticket.unlabeled":
            dropped[key] += 1
            if dropped[key] > 1:
                return False, f"label '{key[1]}' dropped twice from {e.subject} at +{e.at - h.start:.0f}s"
        elif e.kind == "worktree.added":
            removed[e.subject] = 0  # a new worktree at the same path (recreated): removing it again is no repeat
        elif e.kind == "worktree.removed":
            removed[e.subject] += 1
            if removed[e.subject] > 1:
                return False, f"worktree {e.subject} removed twice"
    paths = h.extra.get("quarantine_paths", [])
    twice = sorted({p for p in paths if paths.count(p) > 1})
    if twice:
        return False, f"quarantined twice: {', '.join(twice[:5])}"
    return True, f"{sum(dropped.values())} label drop(s), {len(removed)} worktree removal(s), {len(paths)} quarantined, none twice"


# a daemon's pass that failed on one of these failed on its own code (or on data it should have refused): the
# infrastructure's failures (OSError, a subprocess, the store away) are journaled and retried, and allowed
PROGRAMMING_ERRORS = ("TypeError", "AttributeError", "NameError", "UnboundLocalError", "LookupError", "IndexError",
                      "KeyError", "ValueError", "ZeroDivisionError", "AssertionError", "RecursionError",
                      "NotImplementedError", "UnicodeError")
PASS_ERRORS = ("dispatch.error", "supervisor.error", "reaper.error")


def inv_no_internal_error(h: History) -> tuple[bool, str]:
    """No daemon pass failed on healer's own code. `dispatch.error` / `supervisor.error` / `reaper.error` journal a
    failed pass (healer/fleet/failed_pass.py) and the daemon goes on: the game day would pass over a tick that
    raised TypeError every time. Failures of the world (OSError, a git or store error) are a fault's story."""
    bad = [e for e in h.events if e.kind in PASS_ERRORS
           and str(e.payload.get("error", "")).split(":", 1)[0].strip() in PROGRAMMING_ERRORS]
    if bad:
        e = bad[0]
        return False, (f"{len(bad)} pass(es) failed on healer's own code, first at +{e.at - h.start:.0f}s: "
                       f"{e.kind} {str(e.payload.get('error'))[:160]}")
    n = sum(e.kind in PASS_ERRORS for e in h.events)
    return True, f"no pass failed on healer's own code ({n} failed on the world's)"


INVARIANTS: dict[str, Callable[[History], tuple[bool, str]]] = {
    "one_live_agent_per_ticket": inv_one_live_agent_per_ticket,
    "no_user_file_deleted": inv_no_user_file_deleted,
    "intents_settled": inv_intents_settled,
    "one_lease_holder": inv_one_lease_holder,
    "notifications_within_quota": inv_notifications_within_quota,
    "no_leftovers": inv_no_leftovers,
    "no_corpse": inv_no_corpse,
    "never_merged_broken": inv_never_merged_broken,
    "no_double_effect": inv_no_double_effect,
    # general promises of healer (chaos/invariants.py says where each is promised)
    "ticket_moves_legal": inv.inv_ticket_moves_legal,
    "launch_only_in_progress": inv.inv_launch_only_in_progress,
    "no_launch_while_held": inv.inv_no_launch_while_held,
    "launches_within_budget": inv.inv_launches_within_budget,
    "escalations_reach_needs_human": inv.inv_escalations_reach_needs_human,
    "escalations_leave_evidence": inv.inv_escalations_leave_evidence,
    "intents_journaled": inv.inv_intents_journaled,
    "remedies_within_limits": inv.inv_remedies_within_limits,
    "ticks_report_their_work": inv.inv_ticks_report_their_work,
    "no_internal_error": inv_no_internal_error,
}
# the invariants every simulated run is held to, whatever its expectations say: the engine adds those a scenario does
# not name (standard_checks, from chaos/engine/base.py `finish`), so a broken general promise fails any game day that
# runs it, not only the one whose story mentions it; hypothesis exploration lists them in its schedules too
STANDARD = ("one_live_agent_per_ticket", "no_user_file_deleted", "intents_settled", "one_lease_holder",
            "ticket_moves_legal", "launch_only_in_progress", "no_launch_while_held", "launches_within_budget",
            "escalations_reach_needs_human", "escalations_leave_evidence", "intents_journaled", "remedies_within_limits",
            "ticks_report_their_work", "notifications_within_quota", "no_internal_error")


assert set(INVARIANTS) == set(INVARIANT_NAMES), "chaos/scenario_parts.py INVARIANT_NAMES must list every invariant"


def standard_checks(expect: list[Checker], h: History) -> list[Check]:
    """The STANDARD invariants the scenario's own expectations do not already name, one Check each, named as the
    expectation `invariant: NAME` would be."""
    named = {c.spec for c in expect if c.kind == "invariant"}
    out = []
    for name in STANDARD:
        if name in named:
            continue
        title = f"invariant({name})"
        try:
            ok, msg = INVARIANTS[name](h)
        except (KeyError, ValueError, TypeError) as e:
            ok, msg = False, f"checker could not run: {type(e).__name__}: {e}"
        out.append(Check(title, ok, msg if ok else f"expectation '{title}' broken: {msg}", "invariant"))
    return out


def check_invariant(spec: str, h: History) -> tuple[bool, str]:
    fn = INVARIANTS.get(spec)
    if fn is None:
        raise ValueError(f"unknown invariant {spec!r}; known: {', '.join(INVARIANTS)}")
    return fn(h)


CHECKERS: dict[str, Callable[[Any, History], tuple[bool, str]]] = {
    "ticket_states": check_ticket_states,
    "tickets": check_tickets,
    "count": check_count,
    "event": check_event,
    "never": check_never,
    "never_after": check_never_after,
    "invariant": check_invariant,
    "notifications": check_notifications,
    "within": check_within,
    "gaps": check_gaps,
    "labels": check_labels,
    "files": check_files,
    "state": check_state,
}


def check_command(spec: dict, h: History) -> tuple[bool, str]:
    """A `command` probe: run argv after the game day (cwd: the fleet root when known); its exit status
    (default 0) and, if given, a text its stdout must contain."""
    cwd = spec.get("cwd") or h.extra.get("root")
    r = probe(spec["run"], cwd=str(cwd) if cwd else None, timeout=float(spec.get("timeout", 60)))
    want = int(spec.get("status", 0))
    what = f"`{' '.join(r['command'])}` exited {r['status']}"
    if r["status"] != want:
        return False, f"{what}, expected {want}: {(r['stderr'] or r['stdout']).strip()[-200:]}"
    if spec.get("stdout_contains") and str(spec["stdout_contains"]) not in r["stdout"]:
        return False, f"{what}; stdout lacks {spec['stdout_contains']!r}"
    return True, what


CHECKERS["command"] = check_command

