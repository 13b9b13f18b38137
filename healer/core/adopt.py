"""Adopted loops (issue 44, docs/adopt.md): which running processes the policy's `adopt:` rules adopt, and what is
wrong with the loops adopted. Pure: the shell (healer/adopt.py) reads /proc, the session transcripts and git, and
hands the results here as values.

Theory of operation:
  - `match` turns a snapshot of the process table into candidates: the first rule whose `match` finds the argv
    (and no `exclude` does), in a git worktree (the shell resolved each cwd's top level). One loop is one candidate:
    among the matching processes of one process group and worktree, the one whose parent is not itself a match
    (loop.sh, not each `claude -p` it starts), the oldest when several are.
  - A process is known by (pid, start ticks): `ident` is the adopted id, and `same` is the check made before every
    signal. A pid the kernel gave to another process has another start time.
  - `findings` judges each adopted loop that is still the same process against its rule's thresholds; the shell
    observed everything it needs (activity, spend, iterations, worktree states).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from healer.conventions import ADOPTED_FINDINGS
from healer.core.model import Finding, Snapshot
from healer.records import Adopted

KINDS = ADOPTED_FINDINGS
SEVERITY = {"adopted_cost": "critical", "adopted_stuck": "warning", "adopted_iterations": "warning",
            "adopted_cycle": "warning", "adopted_no_progress": "warning", "adopted_idle": "info",
            "adopted_procs": "warning", "adopted_memory": "warning", "adopted_same_failure": "warning",
            "adopted_gone": "warning"}


@dataclass(frozen=True)
class Proc:
    """One process as /proc shows it (or as a simulated world says)."""

    pid: int
    ppid: int
    pgid: int
    start_ticks: int  # /proc/PID/stat field 22
    argv: tuple[str, ...]
    cwd: str | None  # None: unreadable (another user's, or gone)
    uid: int = -1
    env: Mapping[str, str] = field(default_factory=dict)  # the few variables that locate its session files (HOME...)
    rss: int = 0  # resident memory, bytes (/proc/PID/stat field 24 times the page size)


@dataclass(frozen=True)
class Candidate:
    proc: Proc
    rule: str
    cli: str  # claude | codex | command
    worktree: str


@dataclass(frozen=True)
class AdoptedView:
    """An adopted loop as observed this tick."""

    adopted: Adopted
    same: bool | None  # the same process still runs (pid and start ticks); False: gone or reused; None: cannot tell
    activity_at: float | None = None  # newest mtime of its session files, activity files and worktree files
    cost_usd: float | None = None  # read from its CLI's session transcripts
    iterations: int | None = None  # files of the rule's iterations_glob
    states: tuple[tuple[float, str], ...] = ()  # (first seen, hash of HEAD + diff) of its worktree, oldest first
    sessions: tuple[str, ...] = ()  # the transcripts read
    procs: int | None = None  # processes of the loop (group_usage); None: not counted (no rule asks)
    rss: int | None = None  # their summed resident memory, bytes
    failures: tuple[tuple[float, str, str | None, str], ...] = ()  # (seen at, file key, signature or None, first line)
    over_since: Mapping[str, float] = field(default_factory=dict)
    tool_failures: tuple[tuple[float, str, str | None, str], ...] = ()  # its transcripts' tool results, as `failures`  # "procs"/"memory" -> first tick seen over (step_over)


def ident(pid: int, start_ticks: int) -> str:
    """The adopted id: a ref-name-safe word from the identity (healer/remedy/handlers/adopted.py names refs with it)."""
    return f"A{pid}-{start_ticks}"


def cli_of(argv: Iterable[str], declared: str) -> str:
    if declared != "auto":
        return declared
    words = " ".join(argv)
    if re.search(r"(^|[/\s])claude(\.exe)?(\s|$)", words) or "@anthropic-ai/claude-code" in words:
        return "claude"
    if re.search(r"(^|[/\s])codex(\.js)?(\s|$)", words) or "@openai/codex" in words:
        return "codex"
    return "command"


def _rule_for(p: Proc, rules: Iterable[Any]) -> Any | None:
    words = " ".join(p.argv)
    for r in rules:
        if any(re.search(m, words) for m in r.match) and not any(re.search(x, words) for x in r.exclude):
            return r
    return None


def _inside(top: str, roots: Iterable[str]) -> bool:
    roots = [x.rstrip("/") for x in roots]
    return not roots or any(top == x or top.startswith(x + "/") for x in roots)


def descendants(procs: Iterable[Proc], roots: Iterable[int]) -> set[int]:
    """`roots` and every process below them (by the kernel's parent links): the trees of healer's own agents, which
    are its governed loops' to judge, never an adoption's (a rule matching `claude` must not adopt the Claude Code a
    `healer loop run` started)."""
    children: dict[int, list[int]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p.pid)
    out: set[int] = set()
    todo = [r for r in roots if r > 1]
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out.add(pid)
        todo.extend(children.get(pid, ()))
    return out


def match(procs: Iterable[Proc], rules: Iterable[Any], toplevel: Mapping[str, str | None],
          skip: Iterable[int] = ()) -> list[Candidate]:
    """The loops to adopt among `procs`: `toplevel` maps each cwd to its git top level (None: not in a worktree);
    `skip`: pids never adopted (healer itself, its parents)."""
    rules = list(rules)
    skipped = set(skip)
    hits: dict[int, tuple[Proc, Any, str]] = {}
    for p in procs:
        if p.pid in skipped or not p.argv or p.cwd is None:
            continue
        r = _rule_for(p, rules)
        top = toplevel.get(p.cwd)
        if r is None or not top or not _inside(top, r.worktrees):
            continue
        hits[p.pid] = (p, r, top)
    groups: dict[tuple[int, str], list[Proc]] = {}
    for p, _r, top in hits.values():
        if p.ppid in hits and hits[p.ppid][2] == top:
            continue  # its parent is the loop (loop.sh's `claude -p`, a CLI's own helpers)
        groups.setdefault((p.pgid, top), []).append(p)
    out = []
    for (_g, top), ps in sorted(groups.items()):
        p = min(ps, key=lambda q: (q.start_ticks, q.pid))
        r = hits[p.pid][1]
        out.append(Candidate(p, r.name, cli_of(p.argv, r.cli), top))
    return out


def step_states(states: Iterable[tuple[float, str]], now: float, state: str | None, keep: int) -> tuple[tuple[float, str], ...]:
    """The worktree's state history with this tick's state: a new entry only when it changed."""
    st = tuple(tuple(x) for x in states)
    if state is None or (st and st[-1][1] == state):
        return st  # type: ignore[return-value]
    return (*st, (now, state))[-keep:]  # type: ignore[return-value]


def group_usage(procs: Iterable[Proc], pid: int, pgid: int) -> tuple[int, int]:
    """(processes, summed RSS bytes) of a loop: its process group when it leads one (pgid == pid: a shell's job, a
    tmux pane, setsid), and every descendant of its process wherever its group (a child that left the group is still
    its). A group it shares with whoever started it counts only its own tree: the starter is not the loop."""
    ps = list(procs)
    kids: dict[int, list[Proc]] = {}
    for p in ps:
        kids.setdefault(p.ppid, []).append(p)
    members = {p.pid: p for p in ps if pgid == pid and p.pgid == pgid}
    todo = [p for p in ps if p.pid == pid]
    seen: set[int] = set()
    while todo:
        p = todo.pop()
        if p.pid in seen:
            continue
        seen.add(p.pid)
        members[p.pid] = p
        todo.extend(kids.get(p.pid, ()))
    return len(members), sum(p.rss for p in members.values())


def over_limits(procs: int | None, rss: int | None, r) -> dict[str, bool]:
    """Which of a loop's counted limits it is over now (one comparison, for the finding and for its `since`)."""
    return {"procs": r.max_procs is not None and procs is not None and procs > r.max_procs,
            "memory": r.max_memory is not None and rss is not None and rss > r.max_memory}


def step_over(prev: Mapping[str, float], now: float, over: Mapping[str, bool]) -> dict[str, float]:
    """Since when each limit has been over without a break: kept while over, dropped the first tick it is not
    (a rule's `for:` debounces on it)."""
    return {k: float(prev.get(k, now)) for k, v in sorted(over.items()) if v}


def step_failures(fails: Iterable[Iterable[Any]], now: float, key: str | None, sig: str | None, line: str,
                  keep: int) -> tuple[tuple[float, str, str | None, str], ...]:
    """The loop's failure history with this tick's reading of its failure files: a new entry only when they were
    written again (another `key`: path, size and mtime), a passing write (sig None) included, since it ends a run."""
    fs = tuple((float(t), str(k), s, str(ln)) for t, k, s, ln in (tuple(x) for x in fails))
    if key is None or (fs and fs[-1][1] == key):
        return fs
    return (*fs, (now, key, sig, line))[-keep:]


def same_failure_run(fails: tuple[tuple[float, str, str | None, str], ...]) -> tuple[int, str | None]:
    """(how many of the newest entries in a row carry the same failure signature, that signature)."""
    if not fails or fails[-1][2] is None:
        return 0, None
    sig = fails[-1][2]
    n = 0
    for _t, _k, s, _ln in reversed(fails):
        if s != sig:
            break
        n += 1
    return n, sig


def cycling(states: tuple[tuple[float, str], ...]) -> bool:
    """A-B-A-B: the last four states alternate between two."""
    if len(states) < 4:
        return False
    a, b, c, d = (h for _t, h in states[-4:])
    return a == c and b == d and a != b


def _rules(policy) -> dict[str, Any]:
    return {r.name: r for r in policy.adopt.rules}


def findings(s: Snapshot, policy) -> list[Finding]:
    rules = _rules(policy)
    out: list[Finding] = []
    for v in s.adopted:
        r = rules.get(v.adopted.rule)
        if r is None:
            continue  # a rule the policy no longer has judges nothing
        if v.adopted.state == "gone":
            out.extend(judge_gone(v, r, s.now))
            continue
        if v.adopted.state != "adopted" or v.same is False:
            continue  # a gone process is judged by nobody but judge_gone
        out.extend(judge(v, r, s.now))
    return out


def judge_gone(v: AdoptedView, r, now: float) -> list[Finding]:
    """A loop that ended without healer stopping it (killed, crashed, closed with its terminal, or done): reported for
    the rule's `gone_alert` after its end was seen. Its pid is evidence only: no action signals a gone loop (the
    stop's plan wants a known identity, and the kernel may have given the pid to someone else)."""
    a = v.adopted
    if r.gone_alert is None or a.ended_at is None or now - a.ended_at >= r.gone_alert:
        return []
    ev = {"adopted": a.id, "agent": a.id, "pid": a.pid, "pgid": a.pgid, "start_ticks": a.start_ticks,
          "worktree": a.worktree, "rule": a.rule, "cli": a.cli, "session_id": a.session_id, "started_at": a.started_at,
          "ended_at": a.ended_at, "identity_known": False, "allow_stop": False, "restart": bool(r.restart_command),
          "state": v.states[-1][1] if v.states else None, "snapshotted": (a.data or {}).get("snapshotted_state")}
    return [Finding("adopted_gone", a.id, a.ended_at, ev, SEVERITY["adopted_gone"])]


def judge(v: AdoptedView, r, now: float) -> list[Finding]:
    """One adopted loop against its rule's thresholds, each reported only once `now - since` reaches it."""
    a = v.adopted
    base = {"adopted": a.id, "agent": a.id, "pid": a.pid, "pgid": a.pgid, "start_ticks": a.start_ticks,
            "worktree": a.worktree, "rule": a.rule, "cli": a.cli, "session_id": a.session_id,
            "started_at": a.started_at, "allow_stop": r.allow_stop, "restart": bool(r.restart_command),
            "identity_known": v.same is True,
            # the worktree's state now and at the last recovery snapshot: equal, there is nothing new to snapshot
            "state": v.states[-1][1] if v.states else None, "snapshotted": (a.data or {}).get("snapshotted_state")}
    out: list[Finding] = []

    def add(kind: str, since: float, **ev: Any) -> None:
        out.append(Finding(kind, a.id, since, {**base, **ev}, SEVERITY[kind]))

    if r.cost_cap_usd is not None and v.cost_usd is not None and v.cost_usd >= r.cost_cap_usd:
        add("adopted_cost", a.adopted_at, cost_usd=round(v.cost_usd, 6), cap_usd=r.cost_cap_usd, sessions=list(v.sessions))
    if r.stuck is not None and now - a.started_at >= r.stuck:
        add("adopted_stuck", a.started_at, age=now - a.started_at, threshold=r.stuck)
    if r.max_iterations is not None and v.iterations is not None and v.iterations >= r.max_iterations:
        add("adopted_iterations", a.adopted_at, iterations=v.iterations, max_iterations=r.max_iterations)
    if cycling(v.states):
        add("adopted_cycle", v.states[-1][0], states=[h for _t, h in v.states[-4:]])
    if r.no_progress is not None and v.states and now - v.states[-1][0] >= r.no_progress:
        add("adopted_no_progress", v.states[-1][0], state=v.states[-1][1], threshold=r.no_progress)
    over = over_limits(v.procs, v.rss, r)
    if over["procs"]:
        add("adopted_procs", v.over_since.get("procs", now), procs=v.procs, max_procs=r.max_procs)
    if over["memory"]:
        add("adopted_memory", v.over_since.get("memory", now), rss=v.rss, max_memory=r.max_memory,
            procs=v.procs)
    # failure files: "PATH:SIZE:MTIME" keys; transcripts: "SESSION-FILE#N" (the Nth tool result of that transcript)
    for source, fails, sep in (("failure_files", v.failures, ":"), ("transcript", v.tool_failures, "#")):
        n, sig = same_failure_run(fails)
        if r.same_failure is not None and n >= r.same_failure:
            run = fails[-n:]
            add("adopted_same_failure", run[0][0], signature=sig, times=n, threshold=r.same_failure, line=run[-1][3],
                source=source, files=sorted({k.split(sep)[0] for _t, k, _s, _l in run}))
            break  # one finding a loop: the files' run first (what its own gates said)
    if r.idle is not None:
        since = max(v.activity_at or 0.0, a.started_at)
        if now - since >= r.idle:
            add("adopted_idle", since, activity_at=v.activity_at, threshold=r.idle)
    return out
