"""decide(): findings -> rules -> step sequences -> limits -> Decision. Pure.

Theory of operation:
  1. Detect every finding (findings.py, waitfor.py, sentinels.py), in a fixed order
     (severity, kind, subject), so the blast radius always keeps the same ones.
  2. For each firing finding, the rule in force (rules.py) gives the steps. The
     launch budget (`budget_spent`) or `escalate_after` attempts on the subject turn
     the steps into a single `escalate`. Steps with nothing to act on are dropped.
  3. `notify` steps, sentinels and escalations become Alerts, deduplicated by key
     through memory.cooldowns (window: sentinels.cooldown). Alerts go out even when
     halted: observe-only still observes.
  4. The remaining steps of a finding are one all-or-nothing sequence: a debounce
     (`for`), a busy worktree, or the first limit that refuses (limits.py) defers
     all of it, with the reason.
  5. Memory comes back updated: first_seen/signals for what fires now (what stopped
     firing is forgotten), attempt/action/rule times for what was granted, pruned
     to the longest window that still needs them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from healer import actions as registry
from healer import durations
from healer.core import adopt, limits, sentinels, trigger, trusted_time, waitfor
from healer.core import findings as fd
from healer.core.model import UNKNOWN, Alert, Decision, Finding, Memory, PlannedAction, Snapshot
from healer.core.rules import APPLICABLE, SENTINELS, effective, select

DAY = 86400.0


def detect(snapshot: Snapshot, policy, ix: fd.Index | None = None) -> list[Finding]:
    """Every finding at snapshot.now, in planning order, one per key."""
    ix = fd.index(snapshot) if ix is None else ix
    return ordered(fd.agents(snapshot, policy, ix) + fd.tickets(snapshot, policy, ix) + fd.worktrees(snapshot, policy, ix)
                   + fd.stale_blocks(snapshot, policy, ix) + waitfor.cycles(snapshot, policy, ix)
                   + sentinels.sentinels(snapshot, policy, ix) + adopt.findings(snapshot, policy))


def ordered(found: list[Finding]) -> list[Finding]:
    """Planning order (severity, kind, subject), the first of each key only."""
    found.sort(key=fd.order_key)
    seen: set[str] = set()
    out = []
    for f in found:
        if f.key not in seen:
            seen.add(f.key)
            out.append(f)
    return out


def _pa(action: str, subject: str, f: Finding, rule: str | None, **params) -> PlannedAction:
    params.setdefault("why", f"{f.key} (rule {rule})")
    return PlannedAction(action, subject, params, reason=f.key, rule=rule)


def _step(name: str, f: Finding, do: list[str], rule: str | None, s: Snapshot, why: str) -> list[PlannedAction]:
    """One step of a rule for one finding, planned by its action's spec (healer/actions/<name>.py).

    An action no spec registers, or one that is never planned from a finding, is an error, never a silent []:
    the policy refuses such names, so reaching here with one is a bug."""
    spec = registry.get(name)  # raises UnknownAction
    if spec.plan is None:
        raise registry.UnknownAction(name, "it is never planned from a rule's step")
    return spec.plan(registry.Step(name, f, rule, tuple(do), s, why))


def _text(f: Finding, now: float) -> str:
    age = durations.format(max(now - f.since, 0.0))
    ev = f.evidence
    what = {
        "agent_idle": f"agent {ev.get('agent')} shows no heartbeat or progress",
        "dispatch_frozen": ("no dispatcher pass (its process is gone): nothing is launched, reaped or merged, and "
                            "nobody re-checks main" + (", dispatch paused" if ev.get("dispatch_paused") else ""))
                           if ev.get("dispatcher") == "silent" else
                           f"no launch while {ev.get('ready')} ticket(s) are ready and "
                           f"{ev.get('pool_size', 0) - ev.get('live_agents', 0)} slot(s) free",
        "pool_saturated": f"pool full ({ev.get('live_agents')}/{ev.get('pool_size')}) with {ev.get('ready')} ticket(s) waiting",
        "no_closes": f"{ev.get('open')} proposal(s) open, none closed",
        "main_red": "main is red" + (", dispatch paused" if ev.get("dispatch_paused") else ", pausing dispatch"),
        "supervisor_silent": "no supervisor tick",
        "adopted_idle": f"adopted loop (pid {ev.get('pid')}, {ev.get('worktree')}) wrote nothing",
        "adopted_stuck": f"adopted loop (pid {ev.get('pid')}, {ev.get('worktree')}) has run",
        "adopted_cost": f"adopted loop (pid {ev.get('pid')}) spent ${ev.get('cost_usd', 0):.2f} of its "
                        f"${ev.get('cap_usd', 0):.2f} cap in",
        "adopted_iterations": f"adopted loop (pid {ev.get('pid')}) ran {ev.get('iterations')} iterations "
                              f"(cap {ev.get('max_iterations')}) in",
        "adopted_no_progress": f"adopted loop (pid {ev.get('pid')}): HEAD and diff of {ev.get('worktree')} unchanged",
        "adopted_cycle": f"adopted loop (pid {ev.get('pid')}): worktree states A-B-A-B",
        "adopted_procs": f"adopted loop (pid {ev.get('pid')}) runs {ev.get('procs')} processes (cap {ev.get('max_procs')})",
        "adopted_memory": f"adopted loop (pid {ev.get('pid')}) holds {ev.get('rss')} bytes resident "
                          f"(cap {ev.get('max_memory')})",
        "adopted_same_failure": f"adopted loop (pid {ev.get('pid')}) failed the same way {ev.get('times')} times in a "
                                f"row ({ev.get('line')})",
        "adopted_gone": f"adopted loop (pid {ev.get('pid')}, {ev.get('worktree')}) ended without healer stopping it",
        "spend_rate": f"${ev.get('spent_usd', 0):.2f} spent by the loops within {durations.format(ev.get('window', 0))} "
                      f"(alarm at ${ev.get('threshold_usd', 0):.2f}); top: {ev.get('top_run')}",
    }.get(f.kind, f.kind.replace("_", " "))
    return f"{f.kind} {f.subject}: {what} for {age}"


def _labels(f: Finding, ix) -> list[str]:
    """The labels a rule's `labels:` is matched against: the stale ones for stale_label, else the ticket's."""
    if f.kind == "stale_label":
        return list((f.evidence.get("labels") or {}).keys())
    t = ix.tickets.get(f.evidence.get("ticket") or f.subject)
    return list(t.labels) if t is not None else []


def _split_stale(f: Finding, policy) -> list[Finding]:
    """A ticket's stale labels answered by different rules become one finding per rule, so a rule
    for one label acts on that label only and the others keep theirs."""
    labels = (f.evidence.get("labels") or {}) if f.kind == "stale_label" else {}
    groups: dict[str, dict] = {}
    for lb, at in labels.items():
        r = select(policy, f.kind, [lb])
        groups.setdefault(r.id if r else "", {})[lb] = at
    if len(groups) <= 1:
        return [f]
    return [replace(f, evidence={**f.evidence, "labels": g}) for g in groups.values()]


def decide(snapshot: Snapshot, policy, memory: Memory, *, found: list[Finding] | None = None,
           ix: fd.Index | None = None) -> Decision:
    """`found` and `ix`: the findings and index of this very snapshot, when the caller has them
    (healer/core/incremental.py); otherwise they are computed here."""
    now = snapshot.now
    if found is None or ix is None:
        ix = fd.index(snapshot)
        found = detect(snapshot, policy, ix)
    firing = [f for f in found if f.status != UNKNOWN]
    rules = effective(policy)
    halted = snapshot.halted or policy.remediation.observe_only
    glob = limits.for_policy(policy, snapshot.halted)
    window = limits.retention(policy)
    cd = policy.sentinels.cooldown
    allowed = set(policy.remediation.allowed)

    first_seen = {f.key: memory.first_seen.get(f.key, now) for f in firing}
    signals = {f.key: int(memory.signals.get(f.key, 0)) + 1 for f in firing}
    attempts = {k: list(v) for k, v in memory.attempts.items()}
    action_times = {k: list(v) for k, v in memory.action_times.items()}
    rule_times = {k: list(v) for k, v in memory.rule_times.items()}
    cooldowns = dict(memory.cooldowns)
    tally = limits.Tally(now, memory)

    actions: list[PlannedAction] = []
    deferred: list[tuple[PlannedAction, str]] = []
    alerts: list[Alert] = []

    def cooling(key: str) -> bool:
        last = cooldowns.get(key)
        return last is not None and now - last < cd

    def alert(key: str, text: str, severity: str, evidence: dict) -> None:
        if not cooling(key):
            cooldowns[key] = now
            alerts.append(Alert(key, text, severity, evidence))

    def grant(seq: list[PlannedAction], key: str | None, rule_id: str | None, by: str) -> None:
        actions.extend(seq)
        tally.grant(seq, key, rule_id, by)
        for a in seq:
            action_times.setdefault(a.action, []).append(now)
            if a.action == "escalate":
                cooldowns[f"escalate:{a.subject}"] = now
                alerts.append(Alert(f"escalate:{a.subject}", f"escalated {a.subject}: {a.params.get('finding')}: "
                                    f"{a.params.get('why')}", "critical", dict(a.params.get("evidence") or {})))
        if key is not None and limits.remediating(seq):
            attempts.setdefault(key, []).append(now)
        if rule_id:
            rule_times.setdefault(rule_id, []).append(now)

    labeled = any(r.labels for r in policy.rules)
    if labeled:
        firing = [g for f in firing for g in _split_stale(f, policy)]
    for f in firing:
        rule = select(policy, f.kind, _labels(f, ix)) if labeled else rules.get(f.kind)
        age = now - first_seen[f.key]
        # an age that crossed a wall-clock jump (or is judged on a skewed clock) acts on nothing and pages nobody
        # until confirmed on the monotonic clock (core/trusted_time.py); an info notice may go on
        clock_hold = trusted_time.finding_hold(f.kind, f.since, f.evidence, policy, snapshot.time, snapshot.clock)
        if rule is None:
            if f.kind in SENTINELS and (clock_hold is None or f.severity == "info"):
                alert(f.key, _text(f, now), f.severity, f.evidence)
            continue
        debounce = None
        if age < rule.for_:
            debounce = f"debounce: firing for {durations.format(max(age, 0))} of {durations.format(rule.for_)}"
        do, why = list(rule.do), f"rule {rule.id}"
        n_att = sum(1 for t in memory.attempts.get(f.subject) or () if now - t < window)
        escalating = False
        if f.evidence.get("budget_spent"):
            do, why, escalating = ["escalate"], f"launch budget spent: {f.evidence['budget_spent']}", True
        elif rule.escalate_after is not None and n_att >= rule.escalate_after:
            do, why, escalating = ["escalate"], f"{n_att} remediation attempts >= escalate_after {rule.escalate_after}", True
        if escalating and "stop_agent" in APPLICABLE[f.kind] and f.evidence.get("agent_live"):
            # an escalation stops the work (a live agent's tree) before the ticket goes to needs_human, whatever rule
            # escalates (a default or an inline one): the next agent must not start on what a human now holds
            do = ["stop_agent", "escalate"]
        # sentinels are alarms whatever their rule says; a rule's notify obeys the whitelist; both obey `for`
        if f.kind in SENTINELS or "notify" in do:
            hold = debounce or (clock_hold if f.severity != "info" else None)
            if hold:
                if "notify" in do:
                    deferred.append((_pa("notify", f.subject, f, rule.id), hold))
            elif "notify" in allowed or f.kind in SENTINELS:
                alert(f.key, _text(f, now), f.severity, f.evidence)
            else:
                deferred.append((_pa("notify", f.subject, f, rule.id), "not allowed: notify is not in remediation.allowed"))
        seq: list[PlannedAction] = []
        for name in do:
            if name == "notify":
                continue
            registry.get(name)  # an action no spec registers is an error (UnknownAction), not a step skipped
            if name not in APPLICABLE[f.kind]:
                deferred.append((_pa(name, f.subject, f, rule.id), f"not applicable: {name} does nothing for {f.kind}"))
                continue
            seq.extend(_step(name, f, do, rule.id, snapshot, why))
        if not seq:
            continue
        if any(a.action == "escalate" for a in seq) and cooling(f"escalate:{f.subject}"):
            for a in seq:
                if a.action == "escalate":
                    deferred.append((a, f"cooldown: {f.subject} already escalated within {durations.format(cd)}"))
            seq = [a for a in seq if a.action != "escalate"]
            if not seq:
                continue
        reason = None
        if halted:
            reason = "halt"
        elif debounce:
            reason = debounce
        elif clock_hold:
            reason = clock_hold
        elif f.evidence.get("busy_pids") and any(a.action in ("remove_worktree", "quarantine_file") for a in seq):
            reason = f"busy: pids {f.evidence['busy_pids']} have their cwd or an open file inside"
        else:
            # an escalation ends the rule's remediation: its own caps (max_per_ticket, reached by the very attempts
            # that escalate) do not hold it back; the global limits (whitelist, quiet period, rates) still do
            reason = glob.why_not(seq, f.subject, rule.id, tally) or (None if escalating else limits.for_rule(
                rule, policy).why_not(seq, f.subject, rule.id, tally))
        if reason:
            deferred.extend((a, reason) for a in seq)
        else:
            grant(seq, f.subject, rule.id, f.key)

    if (snapshot.dispatch_paused and snapshot.dispatch_paused_by == "healer" and snapshot.main_status == "green"
            and "main" not in snapshot.failed_sources):
        seq = [PlannedAction("resume_dispatch", "dispatch", {"by": "healer"}, reason="main green")]
        reason = glob.why_not(seq, None, None, tally)
        if reason:
            deferred.extend((a, reason) for a in seq)
        else:
            grant(seq, None, None, "main green")

    per = max((r.per for r in policy.remediation.rate_limits.values()), default=3600.0)
    mem = Memory(
        first_seen=first_seen,
        signals=signals,
        attempts=_prune(attempts, now, window),
        action_times=_prune(action_times, now, per),
        rule_times=_prune(rule_times, now, limits.HOUR),
        cooldowns={k: t for k, t in cooldowns.items() if now - t < cd},
        repair_runs=[t for t in memory.repair_runs if now - t < 2 * DAY],
    )
    verdict = trigger.decide(trigger.blockages_from_memory(mem, [f.key for f in firing]), mem.repair_runs,
                                    mem.attempts, policy, now, halted=halted)
    return Decision(findings=tuple(found), actions=tuple(actions), alerts=tuple(alerts), deferred=tuple(deferred),
                    memory=mem, repair=verdict.launch, repair_reason=verdict.reason)


def _prune(m: dict[str, list[float]], now: float, window: float) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for k, times in m.items():
        keep = [t for t in times if now - t < window]
        if keep:
            out[k] = keep
    return dict(out)
