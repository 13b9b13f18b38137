"""The invariants every simulated game day is held to, beyond the first four of chaos/checkers.py: general promises
of healer (README.md, docs/fleet.md, docs/supervisor-core.md), each judged from the run's history alone (the
store's append-only events, the intent journal, the final tickets, the engine's own facts in `extra`), never from
the product's decision code: a checker that called the rule it judges could not see that rule broken.

Each is `inv_NAME(history) -> (ok, message)`; chaos/checkers.py registers them in INVARIANTS and STANDARD.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Protocol

from healer import lifecycle


class History(Protocol):
    """What the invariants read of chaos.checkers.History (which imports this module: no import back)."""

    events: list[Any]
    tickets: dict[str, Any]
    intents: list[Any]
    start: float
    extra: dict[str, Any]

# what a launch of any kind records (docs/fleet.md: "launches per ticket, resumes and replays included")
LAUNCHES = ("dispatch.launched", "dispatch.resumed", "dispatch.replayed")
# docs/fleet.md: "A human requeueing the ticket (needs_human/blocked/done -> queued) gives it a fresh budget"
# (closed -> queued reopens it too); written out here from the docs, not imported from the rule it judges
FRESH_BUDGET_FROM = ("needs_human", "blocked", "done", "closed")
# who acts for healer itself on the board (a move by anyone else is a human's or the game day's)
HEALER_ACTORS = ("dispatch", "supervisor", "healer", "repair")


def policy_facts(policy: Any) -> dict[str, Any]:
    """The policy numbers the invariants judge by, as plain data (the engine puts them in `extra["policy"]`)."""
    rem = policy.remediation
    return {"max_launches": policy.retry.max_launches, "allowed": sorted(rem.allowed),
            "max_actions_per_tick": rem.max_actions_per_tick,
            "rate_limits": {a: [lim.count, float(lim.per)] for a, lim in rem.rate_limits.items()}}


def _at(h: History, e: Any) -> str:
    return f"+{e.at - h.start:.0f}s"


def _states(h: History):
    """Walk the events with each ticket's state as its created/moved events say: yields (event, state before it)."""
    state: dict[str, str] = {}
    for e in h.events:
        before = state.get(e.subject)
        if e.kind == "ticket.created":
            state[e.subject] = e.payload.get("state") or lifecycle.QUEUED
        elif e.kind == "ticket.moved":
            state[e.subject] = e.payload.get("to")
        yield e, before, state


def inv_ticket_moves_legal(h: History) -> tuple[bool, str]:
    """Every ticket.moved is a transition of the lifecycle table (healer/lifecycle.py), its `from` is the state the
    ticket's previous event left it in, and each ticket ends in the state its last move says."""
    n = 0
    last: dict[str, str] = {}
    for e, before, _ in _states(h):
        if e.kind != "ticket.moved":
            continue
        n += 1
        frm, to = e.payload.get("from"), e.payload.get("to")
        if before is not None and frm != before:
            return False, f"{e.subject} moved {frm} -> {to} at {_at(h, e)} (event #{e.id}), but it was {before}"
        if (frm, to) not in lifecycle.TRANSITIONS:
            return False, f"{e.subject} moved {frm} -> {to} at {_at(h, e)}: not a transition of the lifecycle"
        last[e.subject] = to
    for tid, st in last.items():
        t = h.tickets.get(tid)
        if t is not None and t.state != st:
            return False, f"{tid} is {t.state} at the end, but its last move took it to {st}"
    return True, f"{n} move(s), every one a lifecycle transition from the state before it"


def inv_launch_only_in_progress(h: History) -> tuple[bool, str]:
    """An agent is launched (or resumed, or replayed) only on a ticket in progress: never on a queued, blocked,
    needs_human, review, done or closed one (docs/fleet.md: launching claims the ticket first)."""
    n = 0
    for e, _, state in _states(h):
        if e.kind in LAUNCHES:
            n += 1
            st = state.get(e.subject)
            if st != lifecycle.IN_PROGRESS:
                return False, f"{e.kind} on {e.subject} at {_at(h, e)} while it was {st or 'unknown'}"
    return True, f"{n} launch(es), each on a ticket in progress"


def inv_no_launch_while_held(h: History) -> tuple[bool, str]:
    """Nothing is launched while dispatch is paused (the `dispatch.paused` setting's events) or while main is red
    (main.red until main.green): docs/fleet.md, "Nothing is launched and no proposal is merged while main is red"."""
    paused = red = False
    n = 0
    for e in h.events:
        if e.subject == "dispatch.paused" and "value" in e.payload:
            paused = bool(e.payload["value"])
        elif e.kind == "main.red":
            red = True
        elif e.kind == "main.green":
            red = False
        elif e.kind in LAUNCHES:
            n += 1
            if paused or red:
                why = "dispatch was paused" if paused else "main was red"
                return False, f"{e.kind} on {e.subject} at {_at(h, e)} while {why}"
        elif e.kind == "proposal.merged" and red:
            return False, f"proposal of {e.subject} merged at {_at(h, e)} while main was red"
    return True, f"{n} launch(es), none while paused or while main was red"


def inv_launches_within_budget(h: History) -> tuple[bool, str]:
    """A ticket gets at most `retry.max_launches` attempts (launches, resumes, replays) between two fresh budgets
    (a move back to queued from needs_human, blocked, done or closed)."""
    cap = int((h.extra.get("policy") or {}).get("max_launches", 0))
    if cap <= 0:
        return True, "no launch budget known for this run"
    used: dict[str, set] = defaultdict(set)  # ticket -> its attempts that count since its budget was fresh
    for e in h.events:
        if e.kind == "ticket.moved" and e.payload.get("to") == lifecycle.QUEUED and e.payload.get("from") in FRESH_BUDGET_FROM:
            used[e.subject] = set()
        elif e.kind == "attempt.started":
            used[e.subject].add(e.payload.get("attempt"))
            if len(used[e.subject]) > cap:
                return False, (f"{e.subject} got attempt #{e.payload.get('attempt')} at {_at(h, e)}, the "
                               f"{len(used[e.subject])}th counted (retry.max_launches {cap}, no fresh budget since)")
        elif e.kind == "attempt.infra":  # the infrastructure's ending "counts toward no launch budget" (docs/fleet.md)
            used[e.subject].discard(e.payload.get("attempt"))
    return True, f"{len(used)} ticket(s), each within {cap} launches per budget"


def inv_escalations_reach_needs_human(h: History) -> tuple[bool, str]:
    """A spent budget moves its ticket where the event says (dispatch.budget_exhausted `to`, needs_human) before the
    pass ends; and a ticket in needs_human leaves it only by someone else's hand (a human, the operator's game day),
    never by healer's own move back to work (docs/fleet.md: a human requeueing it gives it a fresh budget)."""
    pending: dict[str, Any] = {}
    n = 0
    for e, before, _ in _states(h):
        if e.kind == "dispatch.budget_exhausted":  # the pass moves the ticket, then records why
            n += 1
            if before != e.payload.get("to", lifecycle.NEEDS_HUMAN):
                pending[e.subject] = e
        elif e.kind == "ticket.moved":
            p = pending.get(e.subject)
            if p is not None and e.payload.get("to") == p.payload.get("to", lifecycle.NEEDS_HUMAN):
                pending.pop(e.subject)
            if before == lifecycle.NEEDS_HUMAN and e.payload.get("actor") in HEALER_ACTORS \
                    and e.payload.get("to") != lifecycle.CLOSED:
                return False, (f"{e.subject} left needs_human for {e.payload.get('to')} at {_at(h, e)} "
                               f"by healer ({e.payload.get('actor')}), not by a human")
        elif e.kind == "dispatch.tick" and pending:
            tid, p = next(iter(pending.items()))
            return False, f"{tid}'s budget ran out at {_at(h, p)} but the pass ended without moving it to {p.payload.get('to')}"
    for tid, p in pending.items():
        t = h.tickets.get(tid)
        if t is None or t.state != p.payload.get("to", lifecycle.NEEDS_HUMAN):
            return False, f"{tid}'s budget ran out at {_at(h, p)} but it never went to {p.payload.get('to')}"
    return True, f"{n} spent budget(s), each moved to needs_human; none left it by healer's hand"


def inv_intents_journaled(h: History) -> tuple[bool, str]:
    """Each remediation is journaled before it acts (docs/supervisor-core.md): planned, then begun, then done or
    aborted, in that order; every remedy.* event follows its intent's plan; the journal's rows end as their last
    event says; and every action is on the whitelist in force (remediation.allowed)."""
    facts = h.extra.get("policy") or {}
    allowed = set(facts.get("allowed") or ())
    step = {"intent.planned": 0, "intent.begun": 1, "intent.done": 2, "intent.aborted": 2}
    seen: dict[int, int] = {}
    action: dict[int, str] = {}
    for e in h.events:
        iid = e.payload.get("intent") if isinstance(e.payload, dict) else None
        if e.kind in step and isinstance(iid, int):
            s, prev = step[e.kind], seen.get(iid)
            # done only once begun (an effect nobody marked begun could not be recovered), aborted from either
            if (prev is None and s != 0) or (prev is not None and s <= prev and not (prev == 1 and s == 1)) \
                    or (e.kind == "intent.done" and prev != 1):
                was = "nothing" if prev is None else next(k for k, v in step.items() if v == prev)
                return False, f"intent #{iid} ({e.payload.get('action')}): {e.kind} at {_at(h, e)} after {was}"
            seen[iid] = s
            action.setdefault(iid, str(e.payload.get("action")))
            if allowed and e.kind == "intent.planned" and action[iid] not in allowed:
                return False, f"intent #{iid} plans {action[iid]}, not in remediation.allowed ({', '.join(sorted(allowed))})"
        elif e.kind.startswith("remedy.") and isinstance(iid, int) and iid not in seen:
            return False, f"{e.kind} for intent #{iid} at {_at(h, e)} before any intent.planned for it"
    ends = {2: ("done", "aborted"), 1: ("begun",), 0: ("planned",)}
    for i in h.intents:
        s = seen.get(i.id)
        if s is None:
            return False, f"intent #{i.id} {i.action} is in the journal without an intent.planned event"
        if i.state not in ends[s]:
            return False, f"intent #{i.id} {i.action} is {i.state} in the journal, its last event says {ends[s][0]}"
    return True, f"{len(seen)} intent(s) journaled in order, every action allowed"


def inv_remedies_within_limits(h: History) -> tuple[bool, str]:
    """The supervisor's blast radius and rate limits hold (docs/supervisor-core.md): at most
    `remediation.max_actions_per_tick` actions planned in one tick, and at most `count` actions of one kind begun
    per `per` seconds (remediation.rate_limits; the executor counts the intents begun or done since then)."""
    facts = h.extra.get("policy") or {}
    radius = int(facts.get("max_actions_per_tick") or 0)
    rates: dict[str, list] = facts.get("rate_limits") or {}
    per_batch: dict[str, int] = defaultdict(int)
    created = {i.id: i.created_at for i in h.intents}
    done = {i.id for i in h.intents if i.state == "done"}  # one begun then rolled back no longer counts
    begun: dict[str, list[tuple[float, int]]] = defaultdict(list)  # action -> (created_at, intent) begun so far
    for e in h.events:
        p = e.payload if isinstance(e.payload, dict) else {}
        if e.kind == "intent.planned":
            batch = str((p.get("params") or {}).get("_batch") or "")
            if batch.startswith("tick-"):
                per_batch[batch] += 1
                if radius and per_batch[batch] > radius:
                    return False, f"{per_batch[batch]} actions planned in one tick ({batch}), max_actions_per_tick {radius}"
        elif e.kind == "intent.begun" and p.get("action") in rates and p.get("intent") in created:
            count, per = rates[p["action"]]
            inside = [i for at, i in begun[p["action"]] if at >= e.at - per]
            if len(inside) >= count:
                return False, (f"{p['action']} begun at {_at(h, e)} (intent #{p['intent']}) with {len(inside)} already "
                               f"begun in the {per:.0f}s before (rate limit {count} per {per:.0f}s)")
            if p["intent"] in done:
                begun[p["action"]].append((created[p["intent"]], p["intent"]))
    return True, f"{len(per_batch)} tick(s) with actions, within the blast radius and the rate limits"


def inv_ticks_report_their_work(h: History) -> tuple[bool, str]:
    """What a tick's summary event says it did is what the events between it and the tick before it show
    (docs/fleet.md, docs/supervisor.md; `healer status` and the journal show these numbers): a `dispatch.tick`'s
    `launched`, `merged` and `rejected` count that pass's launches and verdicts; a `supervisor.tick`'s outcomes
    name the actions its tick journaled."""
    since: dict[str, int] = defaultdict(int)
    rejected: set[tuple[str, Any]] = set()
    n = 0
    journaled: dict[str, list[str]] = defaultdict(list)  # supervisor holder -> actions planned in its current tick
    for e in h.events:
        p = e.payload if isinstance(e.payload, dict) else {}
        if e.kind in LAUNCHES:
            since["launched"] += 1
        elif e.kind == "proposal.merged":
            since["merged"] += 1
        elif e.kind == "proposal.rejected":
            since["rejected"] += 1
            rejected.add((e.subject, p.get("proposal")))
        elif e.kind == "proposal.withheld" and (e.subject, p.get("proposal")) in rejected:
            since["rejected"] -= 1  # a verdict given elsewhere while the gates ran: the pass withheld its own
            rejected.discard((e.subject, p.get("proposal")))
        elif e.kind == "intent.planned":
            batch = str((p.get("params") or {}).get("_batch") or "")
            if batch.startswith("tick-"):
                journaled[batch.rsplit("Z-", 1)[-1]].append(str(p.get("action")))
        elif e.kind in ("chaos.crash", "chaos.restart"):  # a pass or tick cut short reports nothing: count afresh
            since.clear()
            rejected.clear()
        elif e.kind == "dispatch.tick":
            n += 1
            for k in ("launched", "merged", "rejected"):
                if k in p and int(p[k]) != since[k]:
                    return False, f"dispatch.tick at {_at(h, e)} (event #{e.id}) says {k} {p[k]}, its pass recorded {since[k]}"
            since.clear()
            rejected.clear()
        elif e.kind == "supervisor.tick":
            n += 1
            holder = str(p.get("holder"))
            outs = p.get("outcomes") or []
            got = sorted(journaled.pop(holder, []))
            said = sorted(str(o.get("action")) for o in outs if o.get("status") != "refused")
            if len(outs) < 50 and got != said:
                return False, (f"supervisor.tick at {_at(h, e)} (event #{e.id}) reports {said or 'no action'}, "
                               f"its tick journaled {got or 'none'}")
    return True, f"{n} tick(s), each reporting what it did"


def inv_escalations_leave_evidence(h: History) -> tuple[bool, str]:
    """An escalation tells a human, with the evidence. The dispatcher's spent budget (docs/fleet.md: "labels the
    ticket needs-human, moves it to needs_human, records dispatch.budget_exhausted, notifies, and comments the
    evidence") does all of it in its pass; a proposal's spent replays (`dispatch.blocked`) comment the evidence; the
    supervisor's `escalate` done (docs/supervisor.md) labels the ticket needs-human and comments, within its intent."""
    labels: dict[str, set] = defaultdict(set)
    in_pass: list[Any] = []
    open_: dict[int, list[Any]] = {}  # escalate intents begun -> events since
    n = 0

    def lacks(t: str, seen: list[Any], need: tuple[str, ...]) -> list[str]:
        have = {"label": "needs-human" in labels[t],
                "comment": any(x.kind == "ticket.commented" and x.subject == t for x in seen),
                "page": any(x.kind.startswith("notify.") and x.subject.endswith(":" + t) for x in seen)}
        return [k for k in need if not have[k]]

    for e in h.events:
        p = e.payload if isinstance(e.payload, dict) else {}
        if e.kind == "ticket.created":
            labels[e.subject] = set(p.get("labels") or ())
        elif e.kind == "ticket.labeled":
            labels[e.subject].add(p.get("label"))
        elif e.kind == "ticket.unlabeled":
            labels[e.subject].discard(p.get("label"))
        for seen in open_.values():
            seen.append(e)
        if e.kind == "intent.begun" and p.get("action") == "escalate":
            open_[p.get("intent")] = []
        elif e.kind in ("intent.done", "intent.aborted") and p.get("intent") in open_:
            seen = open_.pop(p.get("intent"))
            subj = next((i.subject for i in h.intents if i.id == p.get("intent")), e.subject)
            if e.kind == "intent.done":
                n += 1
                miss = lacks(subj, seen, ("label", "comment"))
                if miss:
                    return False, f"escalate (intent #{p.get('intent')}) of {subj} done at {_at(h, e)} without its {' and '.join(miss)}"
        in_pass.append(e)
        if e.kind == "dispatch.tick":
            for x in in_pass:
                need = {"dispatch.budget_exhausted": ("label", "comment", "page"), "dispatch.blocked": ("comment",)}.get(x.kind)
                if need:
                    n += 1
                    miss = lacks(x.subject, in_pass, need)
                    if miss:
                        return False, f"{x.kind} on {x.subject} at {_at(h, x)}: its pass left no {', no '.join(miss)}"
            in_pass = []
        elif e.kind in ("chaos.crash", "chaos.restart"):
            in_pass = []
    return True, f"{n} escalation(s), each with its label, comment and page"
