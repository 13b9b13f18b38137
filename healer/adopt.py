"""Adopting the loops healer did not launch (issue 44, docs/adopt.md): the shell around healer/core/adopt.py.

    scan       the process table (a port: `ProcTable`; /proc here, a list in the simulated world) -> candidates
               (healer.core.adopt.match) -> each new one registered in the store (`adopted` table, event
               adopt.registered) with its identity: pid, process group, start ticks (/proc/PID/stat field 22)
    observe    each adopted loop of this host: still the same process (pid + start ticks)? its newest activity
               (session transcripts, activity files, worktree files), its spend (its CLI's own transcripts, priced
               by healer/loop/usage.py), its iterations, its worktree's state (HEAD + diff) -> AdoptedView
               values for the core; a loop whose process is gone is marked so (adopt.gone)

Nothing here signals, restarts or re-parents a process: the actions do (healer/remedy/handlers/adopted.py).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from healer import git
from healer.clock import Clock
from healer.core.adopt import (
    AdoptedView,
    Candidate,
    Proc,
    descendants,
    group_usage,
    ident,
    match,
    over_limits,
    step_failures,
    step_over,
    step_states,
)
from healer.fleet.snapshot import HOST
from healer.loop import usage
from healer.loop.decide import failure_signature, shows_error
from healer.records import Adopted

ENV_KEYS = ("HOME", "CLAUDE_CONFIG_DIR", "CODEX_HOME")  # what locates a CLI's session files
MAX_WALK = 5000  # worktree files looked at for the newest mtime (a huge tree is judged by its first ones)
SKIP_DIRS = {".git", "node_modules", ".venv", "__pycache__"}


class ProcTable(Protocol):
    """The process table, as the adoption reads it (the simulated world swaps it for a list)."""

    def scan(self) -> list[Proc]: ...
    def start_ticks(self, pid: int) -> int | None: ...  # None: no such process (or a zombie)
    def boot_time(self) -> float: ...  # wall time of boot, to turn start ticks into a time
    def kill_group(self, pgid: int, sig: int) -> None: ...  # the only ways a signal reaches an adopted loop
    def kill(self, pid: int, sig: int) -> None: ...


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()  # the command name may hold spaces and parentheses
    return rest  # rest[0] is field 3 (state)


class RealProcTable:
    """This machine's /proc."""

    def __init__(self) -> None:
        self._ticks = os.sysconf("SC_CLK_TCK")
        self._page = os.sysconf("SC_PAGE_SIZE")

    def start_ticks(self, pid: int) -> int | None:
        f = _stat_fields(pid)
        if f is None or f[0] in ("Z", "X"):
            return None
        return int(f[19])  # field 22

    def kill_group(self, pgid: int, sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass  # the group ended by itself

    def kill(self, pid: int, sig: int) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    def boot_time(self) -> float:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
        return 0.0

    def scan(self) -> list[Proc]:
        out = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            f = _stat_fields(pid)
            if f is None or f[0] in ("Z", "X"):
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    argv = tuple(a.decode(errors="replace") for a in fh.read().split(b"\0") if a)
                cwd: str | None = os.readlink(f"/proc/{pid}/cwd")
                uid = os.stat(f"/proc/{pid}").st_uid
            except OSError:
                argv, cwd, uid = (), None, -1
            if not argv:
                continue  # a kernel thread, or gone
            env = _env_of(pid)
            out.append(Proc(pid, int(f[1]), int(f[2]), int(f[19]), argv, cwd, uid, env, int(f[21]) * self._page))
        return out


def _env_of(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, _, v = item.partition(b"=")
        name = k.decode(errors="replace")
        if name in ENV_KEYS:
            out[name] = v.decode(errors="replace")
    return out


def toplevel_of(cwd: str) -> str | None:
    """The git top level holding `cwd` (a `.git` folder or file), found on the file system: no git runs."""
    p = Path(cwd)
    for d in (p, *p.parents):
        if (d / ".git").exists():
            return str(d)
    return None


@dataclass
class ScanResult:
    found: list[Candidate] = field(default_factory=list)
    registered: list[Adopted] = field(default_factory=list)  # new this scan
    known: list[Adopted] = field(default_factory=list)  # already adopted
    gone: list[Adopted] = field(default_factory=list)


def own_pids() -> set[int]:
    """healer itself and its ancestors: never adopted (a supervisor started from inside a loop's shell)."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        f = _stat_fields(pid)
        pid = int(f[1]) if f else 0
    return out


def scan(store, policy, clock: Clock, table: ProcTable | None = None, *, host: str = HOST, write: bool = True,
         skip: Iterable[int] | None = None) -> ScanResult:
    """Find the loops the policy's adopt rules match; register the new ones unless `write` is false."""
    table = table or RealProcTable()
    procs = table.scan()
    tops = {p.cwd: toplevel_of(p.cwd) for p in procs if p.cwd}
    rules = [r.model_copy(update={"worktrees": [os.path.realpath(os.path.expanduser(w)) for w in r.worktrees]})
             for r in policy.adopt.rules]
    # healer's own process and ancestors, and the process trees of the agents it launched on this host (their pids
    # are healer's records, their children the kernel's): those are its governed loops', never adopted
    mine = {a.pid for a in store.agents(states=["running"]) if a.pid and a.host == host}
    found = match(procs, rules, tops, (own_pids() if skip is None else set(skip)) | descendants(procs, mine))
    res = ScanResult(found=found)
    known = {a.id: a for a in store.adopted(states=None)}
    boot = table.boot_time()
    tick = os.sysconf("SC_CLK_TCK")
    now = clock.now()
    for c in found:
        p = c.proc
        aid = ident(p.pid, p.start_ticks)
        if aid in known:
            res.known.append(known[aid])
            continue
        a = Adopted(id=aid, rule=c.rule, host=host, pid=p.pid, pgid=p.pgid, start_ticks=p.start_ticks,
                    started_at=boot + p.start_ticks / tick, cwd=p.cwd or "", worktree=c.worktree, cli=c.cli,
                    session_id=None, state="adopted", adopted_at=now,
                    data={"argv": list(p.argv)[:20], "env": dict(p.env), "uid": p.uid})
        if write and store.register_adopted(a):
            res.registered.append(a)
        elif not write:
            res.registered.append(a)
    if write:
        res.gone = mark_gone(store, table, host, now)
    return res


def mark_gone(store, table: ProcTable, host: str = HOST, now: float | None = None) -> list[Adopted]:
    gone = []
    for a in store.adopted(host=host):
        if table.start_ticks(a.pid) != a.start_ticks:
            store.update_adopted(a.id, state="gone", ended_at=now, event="adopt.gone",
                                 payload={"pid": a.pid, "start_ticks": a.start_ticks})
            gone.append(a)
    return gone


# -- observing -------------------------------------------------------------------------------------

@dataclass
class _Read:
    size: int
    mtime_ns: int
    cwd: str | None
    session: str | None
    usd: float
    tools: tuple[tuple[str | None, str], ...] = ()  # each tool result in order: (failure signature or None, first line)


_READS: dict[str, _Read] = {}  # path -> what a transcript said at (size, mtime): read again only when it changed


def _expand(pattern: str, env: dict) -> str:
    home = env.get("HOME") or os.path.expanduser("~")
    if pattern.startswith("~"):
        pattern = home + pattern[1:]
    return pattern


def session_globs(a: Adopted, rule) -> list[str]:
    env = (a.data or {}).get("env") or {}
    if rule is not None and rule.session_files is not None:
        return [_expand(g, env) for g in rule.session_files]
    claude = os.path.join(env.get("CLAUDE_CONFIG_DIR") or _expand("~/.claude", env), "projects", "**", "*.jsonl")
    codex = os.path.join(env.get("CODEX_HOME") or _expand("~/.codex", env), "sessions", "**", "*.jsonl")
    if a.cli == "claude":
        return [claude]
    if a.cli == "codex":
        return [codex]
    if rule is None or rule.cli == "auto":
        # a loop runner (loop.sh, ralph) whose CLI the argv does not name: both CLIs' transcripts, kept only when their
        # recorded cwd lies in its worktree and they were written since it started (transcripts())
        return [claude, codex]
    return []


def tool_results(obj: dict) -> list[tuple[str | None, str]]:
    """The tool results of one Claude Code transcript line (a `user` message's `tool_result` blocks), each as (its
    failure signature, its first error line) when `is_error`, else (None, ""): a tool that worked ends a run of
    failures. The signature is the governed loop's own (failure_signature), so numbers, times and paths that change
    between two tellings of one failure do not make it another."""
    if obj.get("type") != "user":
        return []
    msg = obj.get("message")
    content = msg.get("content") if isinstance(msg, dict) else None
    out: list[tuple[str | None, str]] = []
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict) or block.get("type") != "tool_result":
            continue
        if block.get("is_error") is not True:
            out.append((None, ""))
            continue
        raw = block.get("content")
        text = raw if isinstance(raw, str) else "\n".join(
            str(b.get("text", "")) for b in raw if isinstance(b, dict)) if isinstance(raw, list) else ""
        sig, line = failure_signature("tool", text)
        out.append((sig, line.removeprefix("tool: ")))
    return out


def _read_transcript(path: str, cli: str, prices) -> _Read | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    old = _READS.get(path)
    if old is not None and old.size == st.st_size and old.mtime_ns == st.st_mtime_ns:
        return old
    codex = cli == "codex" or os.path.basename(path).startswith("rollout-")  # Codex names its session files so
    # one reader of the CLIs' lines (healer/loop/usage.py, the governed loop's too): spend, the CLI's own bill
    # (Claude Code's cost-state, used when higher), the session id and the cwd the lines name
    meter = usage.Meter("codex" if codex else "claude", prices)
    tools: list[tuple[str | None, str]] = []
    try:
        with open(path, "rb") as f:
            for line in f:
                meter.feed(line)
                if b'"tool_result"' in line:
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(obj, dict):
                        tools.extend(tool_results(obj))
    except OSError:
        return None
    r = _Read(st.st_size, st.st_mtime_ns, meter.cwd, meter.session, meter.usd, tuple(tools))
    _READS[path] = r
    return r


def _under(path: str | None, top: str) -> bool:
    if not path:
        return False
    try:
        return Path(path).resolve().is_relative_to(Path(top).resolve())
    except (OSError, ValueError):
        return False


def transcripts(a: Adopted, rule, prices) -> tuple[list[tuple[str, _Read, float]], float]:
    """The session transcripts of this loop: written since its process started, by a session whose cwd is inside its
    worktree (the CLI writes its cwd on each line: Claude Code's `cwd`, Codex's session_meta `payload.cwd`)."""
    out = []
    for pattern in session_globs(a, rule):
        for path in glob.glob(pattern, recursive=True):
            try:
                mt = os.stat(path).st_mtime
            except OSError:
                continue
            if mt < a.started_at - 1:
                continue  # an older session in the same folder: not this loop's
            r = _read_transcript(path, a.cli, prices)
            if r is not None and _under(r.cwd, a.worktree):
                out.append((path, r, mt))
    return out, sum(r.usd for _p, r, _m in out)


def newest_mtime(top: str, extra: Iterable[str] = ()) -> float | None:
    best = None
    n = 0
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        for name in filenames:
            n += 1
            if n > MAX_WALK:
                break
            try:
                mt = os.lstat(os.path.join(dirpath, name)).st_mtime
            except OSError:
                continue
            best = mt if best is None else max(best, mt)
        if n > MAX_WALK:
            break
    for pattern in extra:
        for path in glob.glob(os.path.join(top, pattern), recursive=True):
            try:
                mt = os.lstat(path).st_mtime
            except OSError:
                continue
            best = mt if best is None else max(best, mt)
    return best


def worktree_state(top: str) -> str | None:
    """HEAD and the whole diff against it (tracked changes and untracked files' contents), as one hash."""
    try:
        head = git.run(top, "rev-parse", "--verify", "-q", "HEAD", check=False).stdout or "-"
        diff = git.raw(top, "diff", "HEAD", "--binary") if head != "-" else b""
        untracked = git.raw(top, "ls-files", "-z", "--others", "--exclude-standard")
    except git.GitError:
        return None
    h = hashlib.sha256(head.encode() + b"\0" + diff + b"\0")
    for rel in sorted(x for x in untracked.split(b"\0") if x):
        h.update(rel + b"\0")
        try:
            h.update(hashlib.sha256(Path(top, rel.decode(errors="surrogateescape")).read_bytes()).digest())
        except OSError:
            pass
    return h.hexdigest()[:16]


FAILURE_TAIL = 256 * 1024  # bytes read of a failure file: its end, where a test runner's summary is


def failure_reading(top: str, globs: Iterable[str]) -> tuple[str | None, str | None, str]:
    """The newest of the loop's failure files: (its key: path, size and mtime, so a rewrite is a new reading even with
    the same words; its failure signature, None when it shows no error line; the first error line). The signature is
    the governed loop's own (healer/loop/decide.py failure_signature): one rule for what "the same failure" is."""
    best: tuple[float, str] | None = None
    for pattern in globs:
        for path in glob.glob(os.path.join(top, pattern), recursive=True):
            try:
                mt = os.stat(path).st_mtime_ns
            except OSError:
                continue
            if best is None or mt > best[0]:
                best = (mt, path)
    if best is None:
        return None, None, ""
    path = best[1]
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            f.seek(max(0, st.st_size - FAILURE_TAIL))
            text = f.read().decode(errors="replace")
    except OSError:
        return None, None, ""
    key = f"{os.path.relpath(path, top)}:{st.st_size}:{st.st_mtime_ns}"
    if not shows_error(text):
        return key, None, ""  # written without an error line: a pass, which ends a run of failures
    sig, line = failure_signature("adopted", text, (top,))
    return key, sig, line.removeprefix("adopted: ")


def _tool_history(fails, seen: dict, found, now: float, keep: int):
    """The loop's tool-result history with what its transcripts added since the last tick (oldest transcript first;
    `seen`: how many results of each were taken already)."""
    out = tuple(tuple(f) for f in fails)
    took: dict[str, int] = {}
    for path, r, _mt in sorted(found, key=lambda x: (x[2], x[0])):
        n = int(seen.get(path, 0))
        for i, (sig, line) in enumerate(r.tools[n:], start=n):
            out = step_failures(out, now, f"{os.path.basename(path)}#{i}", sig, line, keep)
        took[path] = len(r.tools)
    return out, took


def observe(store, policy, clock: Clock, table: ProcTable | None = None, *, host: str = HOST,
            write: bool = True) -> tuple[AdoptedView, ...]:
    """This host's adopted loops as the core judges them; with `write`, their history and session id are kept."""
    table = table or RealProcTable()
    rules = {r.name: r for r in policy.adopt.rules}
    prices = usage.price_table(policy.loop.prices)
    now = clock.now()
    out: list[AdoptedView] = []
    counted = [r for r in rules.values() if r.max_procs is not None or r.max_memory is not None]
    procs = table.scan() if counted else []  # one read of the table for every loop whose rule counts
    for a in store.adopted(states=("gone",), host=host):
        r = rules.get(a.rule)
        if r is not None and r.gone_alert is not None and a.ended_at is not None and now - a.ended_at < r.gone_alert:
            # its worktree as it is now: what a snapshot would hold (the planner skips one that holds it already)
            kept = step_states((a.data or {}).get("states") or (), now, worktree_state(a.worktree), policy.adopt.history)
            out.append(AdoptedView(a, False, states=kept))
    for a in store.adopted(host=host):
        ticks = table.start_ticks(a.pid)
        same = ticks == a.start_ticks
        if not same:
            if write:
                store.update_adopted(a.id, state="gone", ended_at=now, event="adopt.gone",
                                     payload={"pid": a.pid, "start_ticks": a.start_ticks, "now_ticks": ticks})
            out.append(AdoptedView(replace(a, state="gone"), False))
            continue
        rule = rules.get(a.rule)
        found, usd = transcripts(a, rule, prices)
        act = newest_mtime(a.worktree, rule.activity_files if rule else ())
        for _p, _r, mt in found:
            act = mt if act is None else max(act, mt)
        iterations = None
        if rule is not None and rule.iterations_glob:
            iterations = len(glob.glob(os.path.join(a.worktree, rule.iterations_glob), recursive=True))
        states = step_states((a.data or {}).get("states") or (), now, worktree_state(a.worktree), policy.adopt.history)
        fails = (a.data or {}).get("failures") or ()
        if rule is not None and rule.failure_files and rule.same_failure is not None:
            key, sig, line = failure_reading(a.worktree, rule.failure_files)
            fails = step_failures(fails, now, key, sig, line, max(rule.same_failure, policy.adopt.history))
        tool_fails = (a.data or {}).get("tool_failures") or ()
        seen: dict[str, int] = {}
        if rule is not None and rule.transcript_failures and rule.same_failure is not None:
            tool_fails, seen = _tool_history(tool_fails, (a.data or {}).get("tools_seen") or {}, found, now,
                                             max(rule.same_failure, policy.adopt.history))
        n_procs = rss = None
        over: dict[str, float] = {}
        if rule is not None and rule in counted:
            n_procs, rss = group_usage(procs, a.pid, a.pgid)
            over = step_over((a.data or {}).get("over") or {}, now, over_limits(n_procs, rss, rule))
        newest = max(found, key=lambda x: x[2]) if found else None
        session = newest[1].session if newest else None
        if write:
            data: dict[str, Any] = dict(a.data or {})
            changed = ([list(s) for s in states] != data.get("states") or session != a.session_id
                       or [list(f) for f in fails] != [list(f) for f in data.get("failures") or ()]
                       or over != (data.get("over") or {}) or seen != (data.get("tools_seen") or {}))
            if changed:
                data["over"] = over
                if seen:
                    data["tools_seen"] = seen
                    data["tool_failures"] = [list(f) for f in tool_fails]
                data["states"] = [list(s) for s in states]
                if fails:
                    data["failures"] = [list(f) for f in fails]
                store.update_adopted(a.id, data=data, session_id=session)
        out.append(AdoptedView(replace(a, session_id=session or a.session_id), True, act,
                               usd if found else None, iterations, states, tuple(p for p, _r, _m in found),
                               n_procs, rss, tuple(tuple(f) for f in fails), over,
                               tuple(tuple(f) for f in tool_fails)))
    return tuple(out)
