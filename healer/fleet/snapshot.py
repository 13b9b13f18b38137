"""Gather a Snapshot of the fleet: the store plus what only the world can tell (processes, files).

Every data source is wrapped: one that raises is named in `failed_sources` and the
rest of the snapshot is still built (fail-open), so a broken source never crashes a
tick and the sentinels that depend on it report `unknown`.
"""

from __future__ import annotations

import bisect
import gc
import os
from pathlib import Path

from healer import lifecycle, procs
from healer.core import fleet as budget_rules
from healer.core.model import AgentView, Snapshot, WorktreeView
from healer.errors import NotFound
from healer.fleet.busy import busy_map  # noqa: F401 - where chaos's simulated processes find it
from healer.fleet.lost_hosts import host_id
from healer.fleet.ports import REAL as REAL_PORTS
from healer.fleet.results import result_exit
from healer.fleet.runtime import EXITED, GONE, PAUSED, RUNNING, Handle
from healer.realpath import Resolver
from healer.store import keys

HOST = host_id()  # $HEALER_HOST_ID, else the host name
_PROC = os.path.isdir("/proc/self")


def handle_of(agent) -> Handle:
    return Handle(kind=agent.kind, pid=agent.pid, container=agent.container, marker=(agent.data or {}).get("marker"))


def liveness(agent, runtime=None, host: str = HOST) -> tuple[bool | None, bool]:
    """(alive, paused) of an agent; alive is None when nobody can tell (another host, runtime error)."""
    if agent.host and agent.host != host:
        return None, False  # this host's runtime and process table say nothing about another host's agent
    if runtime is not None and getattr(runtime, "kind", agent.kind) == agent.kind:
        try:
            st = runtime.status(handle_of(agent))
        except Exception:  # noqa: BLE001 - a runtime that cannot answer says "unknown", never "dead"
            return None, False
        if st.state == RUNNING:
            return True, False
        if st.state == PAUSED:
            return True, True
        if st.state in (EXITED, GONE):
            return False, False
        return None, False
    if agent.kind != "process":
        return None, False
    if not agent.pid:
        return None, False
    return _pid_state(agent.pid)


def ended_with(agent, runtime=None, host: str | None = None) -> int | None:
    """How an ended agent ended, if anyone can tell: its runtime's exit status (our own child), else
    the result file its loop left. None: it vanished without a word (killed, or nothing recorded), or it
    ran on another host than `host` (its files are that host's)."""
    if host is not None and agent.host and agent.host != host:
        return None
    if runtime is not None and getattr(runtime, "kind", agent.kind) == agent.kind:
        try:
            st = runtime.status(handle_of(agent))
        except Exception:  # noqa: BLE001 - no answer is no exit status, never a crash
            st = None
        if st is not None and st.state == EXITED and st.exit_code is not None and st.exit_code >= 0:
            return st.exit_code
    return result_exit(agent.worktree, agent.run_id)


def _lease_alive(store, name: str, host: str, processes) -> bool | None:
    """Is the process holding lease `name` alive? None when nobody holds it or it runs on another host."""
    lease = store.lease(name)
    if lease is None or lease.host != host or not lease.pid:
        return None
    return processes.alive(lease.pid)


def _pid_state(pid: int) -> tuple[bool, bool]:
    """(alive, stopped) from one read of /proc/PID/stat on Linux (a zombie is dead); psutil elsewhere."""
    if not _PROC:
        alive = procs.alive(pid)
        return alive, alive and procs.stopped(pid)
    try:  # os.open/os.read: no buffered file object per agent per tick (10,000 agents read every tick)
        fd = os.open(f"/proc/{int(pid)}/stat", os.O_RDONLY)
        try:
            raw = os.read(fd, 4096)
        finally:
            os.close(fd)
    except FileNotFoundError:
        return False, False
    except OSError:
        alive = procs.alive(pid)
        return alive, alive and procs.stopped(pid)
    state = raw[raw.rfind(b")") + 2:raw.rfind(b")") + 3]
    if state in (b"Z", b"X", b"x"):
        return False, False
    return True, state in (b"T", b"t")


# -- gather -------------------------------------------------------------------------

def _norm(path) -> str:
    """A lexical absolute form for matching paths the store holds (resolve() costs a syscall per part;
    a string, since a Path per worktree per tick is most of the cost of a 100k-ticket snapshot)."""
    return os.path.abspath(str(path))


def _over(by_id: dict, wt) -> bool:
    t = by_id.get(wt.ticket_id) if wt.ticket_id else None
    return t is None or t.state in lifecycle.TERMINAL

WORKTREES_DIR = ".healer/worktrees"
MAX_LOOSE_FILES = 200  # unknown files reported per tick outside worktrees: a flood is still a finding, not a stall
FULL_EVERY = 300.0  # seconds between full re-reads of the board by a long-lived Gatherer (the safety net)
MAX_CHANGED = 5000  # tickets changed since the last tick beyond which one full read beats re-reading each


YOUNG = 50_000  # the collector's first threshold for such a process
FREEZE_AT = 10_000  # tickets on a long-lived board from which the garbage collector is told to leave it alone


def _freeze() -> None:
    """Move what is alive now (the board just read) out of the collector's sight. Python's full collections
    walk every tracked object: with a 100k-ticket board that was ~0.3 s per steady-state tick, most of it.
    Frozen objects are still freed by reference counting when the board drops them; unfreeze + collect
    first, so cyclic garbage left since the last full read is not kept for good."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    # a tick makes some 200,000 short-lived containers (rows, views, findings): with the default 700 that
    # is ~300 young collections per tick; reference counting frees them anyway
    t0, t1, t2 = gc.get_threshold()
    if t0 < YOUNG:
        gc.set_threshold(YOUNG, t1, t2)


class _Sources:
    """Runs each data source, remembering which ones raised (fail-open)."""

    def __init__(self) -> None:
        self.failed: set[str] = set()
        self.errors: dict[str, str] = {}

    def get(self, name: str, fn, default):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - a broken source is reported, never fatal
            self.failed.add(name)
            self.errors[name] = f"{type(e).__name__}: {e}"
            return default


def _spend(store, policy, now: float) -> list[tuple[float, str, float]]:
    """(at, run, USD) of what the fleet's loops reported spending within sentinels.spend_window: each iteration's
    streamed spend (loop.iteration's cost_usd) and the spend of iterations discarded mid-stream (loop.spend_counted)."""
    out = []
    for e in store.events(kinds=["loop.iteration", "loop.spend_counted"], since=now - policy.sentinels.spend_window):
        usd = e.payload.get("cost_usd") if e.kind == "loop.iteration" else e.payload.get("usd")
        if isinstance(usd, (int, float)) and not isinstance(usd, bool) and usd > 0:
            out.append((e.at, e.subject, float(usd)))
    return out


def _reset_at(e) -> float | None:
    """When a ticket.moved event handed the ticket back to the queue from a human's state (a fresh budget)."""
    return e.at if budget_rules.is_reset(e.payload.get("from"), e.payload.get("to")) else None


def _window(atts, cut: float | None) -> tuple:
    return tuple(budget_rules.in_window(atts, cut))  # the one definition (healer/core/fleet.py)


class _Board:
    """Tickets, proposals and budget attempts: a full read, then only what the event log says changed.

    Every write that changes a ticket, its attempts or its proposals appends an event whose subject
    is the ticket, so re-reading those subjects keeps the copy equal to a full read; writes that
    bypass the event log (by hand) are caught by the scheduled full re-read."""

    def __init__(self) -> None:
        self.tickets: dict[str, object] = {}
        self.props: dict[str, list] = {}
        self.atts: dict[str, list] = {}  # non-terminal tickets only, as the core needs them
        self.resets: dict[str, float] = {}
        self.reopened: set[str] = set()  # tickets a human moved out of done (their merge is history)
        self.seen = 0
        self.full_at: float | None = None
        self.ordered: tuple = ()
        self.keys: list = []  # the sort key of each ticket in `ordered`, in the same order (bisect on change)
        self.merged: set[str] = set()  # tickets whose work is on main (data.merged_commit)
        self.proposals: tuple = ()
        self.budget: dict[str, tuple] = {}
        self.last = "full"

    def full(self, store, mono: float) -> None:
        self.seen = store.last_event_id()  # before reading: a write during the read is applied again next time
        tickets = store.tickets()
        tickets.sort(key=_order)  # the store's order already; Python's, so that bisect agrees with it
        self.tickets = {t.id: t for t in tickets}
        self.ordered = tuple(tickets)
        self.keys = [_order(t) for t in tickets]
        self.merged = {t.id for t in tickets if (t.data or {}).get("merged_commit")}
        self.props = {}
        for p in store.proposals():
            self.props.setdefault(p.ticket_id, []).append(p)
        self.atts = store.all_attempts(skip_ticket_states=sorted(lifecycle.TERMINAL))
        self.resets = {}
        self.reopened = set()
        for e in store.events(kinds=["ticket.moved"], contains='"to":"queued"'):
            at = _reset_at(e)
            if at is not None:
                self.resets[e.subject] = max(self.resets.get(e.subject, 0.0), at)
                if e.payload.get("from") == lifecycle.DONE:
                    self.reopened.add(e.subject)
        self.proposals = tuple(sorted((p for ps in self.props.values() for p in ps), key=lambda p: p.id))
        self.budget = {tid: _window(a, self.resets.get(tid)) for tid, a in self.atts.items()}
        self.full_at = mono
        self.last = "full"

    def apply(self, store, max_changed: int) -> bool:
        """Re-read the tickets the new events name; False when so much changed that a full read is cheaper."""
        heads = store.event_heads(after=self.seen)  # payloads only for the moves (a tick's summary is large)
        if not heads:
            self.last = "unchanged"
            return True
        changed = {subject for _, kind, subject in heads if subject in self.tickets or kind == "ticket.created"}
        if len(changed) > max_changed:
            return False
        last = heads[-1][0]
        moves = store.events(after=self.seen, kinds=["ticket.moved"], until_id=last) \
            if any(kind == "ticket.moved" for _, kind, _ in heads) else []
        for e in moves:
            if e.kind == "ticket.moved":
                at = _reset_at(e)
                if at is not None:
                    self.resets[e.subject] = max(self.resets.get(e.subject, 0.0), at)
                    if e.payload.get("from") == lifecycle.DONE:
                        self.reopened.add(e.subject)
        props_moved = False
        order = list(self.ordered) if changed else []
        for tid in changed:
            old = self.tickets.get(tid)
            if old is not None:  # out of the order; back in below at its new place if it still exists
                i = bisect.bisect_left(self.keys, _order(old))
                del self.keys[i], order[i]
            self.merged.discard(tid)
            try:
                t = store.ticket(tid)
            except NotFound:
                self.tickets.pop(tid, None)
                self.atts.pop(tid, None)
                self.budget.pop(tid, None)
                props_moved |= self.props.pop(tid, None) is not None
                continue
            self.tickets[tid] = t
            k = _order(t)
            i = bisect.bisect_left(self.keys, k)
            self.keys.insert(i, k)
            order.insert(i, t)
            if (t.data or {}).get("merged_commit"):
                self.merged.add(tid)
            ps = store.proposals(tid)
            if ps or tid in self.props:
                props_moved = True
                self.props[tid] = ps
            if t.state in lifecycle.TERMINAL:
                self.atts.pop(tid, None)
                self.budget.pop(tid, None)
            else:
                a = store.attempts(tid)
                if a:
                    self.atts[tid] = a
                    self.budget[tid] = _window(a, self.resets.get(tid))
                else:
                    self.atts.pop(tid, None)
                    self.budget.pop(tid, None)
        if changed:
            self.ordered = tuple(order)
        if props_moved:
            self.proposals = tuple(sorted((p for ps in self.props.values() for p in ps), key=lambda p: p.id))
        self.seen = last
        self.last = f"incremental ({len(changed)} tickets)"
        return True


def _order(t) -> tuple:
    return (t.priority, t.created_at, t.id)


def _budget_attempts(store) -> dict[str, tuple]:
    """Attempts per ticket since a human last handed it back to the queue (a fresh budget),
    as the dispatcher counts them; two queries for the whole fleet."""
    b = _Board()
    b.full(store, 0.0)
    return b.budget


def _loose_files(root: Path, registered: set[str]) -> tuple[str, ...]:
    """Files in the managed worktrees folder that belong to no registered worktree."""
    base = root / WORKTREES_DIR
    try:
        names = sorted(os.listdir(base))  # names first: a Path per registered worktree per tick is most of the cost
    except (FileNotFoundError, NotADirectoryError):
        return ()
    prefix = _norm(base) + "/"
    out: list[str] = []
    for name in names:
        if prefix + name in registered:
            continue
        entry = base / name
        if entry.is_symlink() or entry.is_file():
            out.append(entry.relative_to(root).as_posix())
        elif entry.is_dir() and not (entry / ".git").exists():
            for f in sorted(entry.rglob("*")):
                if f.is_file() or f.is_symlink():
                    out.append(f.relative_to(root).as_posix())
                if len(out) >= MAX_LOOSE_FILES:
                    break
        if len(out) >= MAX_LOOSE_FILES:
            break
    return tuple(out[:MAX_LOOSE_FILES])


def gather(root, store, policy, clock, runtime=None, *, host: str = HOST, ports=None) -> Snapshot:
    """Build the Snapshot the core decides on from a full read. Never raises for a data source that fails."""
    return Gatherer(full_every=0.0).gather(root, store, policy, clock, runtime, host=host, ports=ports)


class Gatherer:
    """Keeps the board (tickets, proposals, budget attempts) between ticks and applies only what changed since
    the last event id; re-reads everything on its first call (a restart), every `full_every` seconds, after a
    failed read, or when more than `max_changed` tickets changed at once. Agents, worktrees, settings and the
    world (processes, files) are read fresh every time: they change without events (heartbeats)."""

    def __init__(self, *, full_every: float = FULL_EVERY, max_changed: int = MAX_CHANGED) -> None:
        self.full_every = full_every
        self.max_changed = max_changed
        self.board: _Board | None = None
        self.views: dict[str, AgentView] = {}  # agent id -> the view handed out last tick (reused while unchanged)
        self.wt_views: dict[str, WorktreeView] = {}
        self._norms: dict[str, str] = {}
        self._root: tuple[str, Path] | None = None

    def root(self, root) -> Path:
        """The fleet root, resolved on the first gather (a long-lived supervisor's root does not move)."""
        hit = self._root
        if hit is None or hit[0] != str(root):
            hit = self._root = (str(root), Path(root).resolve())
        return hit[1]

    def norm(self, path) -> str:
        """_norm, remembered: the same worktree paths come back every tick."""
        n = self._norms.get(path)
        if n is None:
            if len(self._norms) > 200_000:
                self._norms.clear()
            n = self._norms[path] = _norm(path)
        return n

    def _board(self, store, clock) -> _Board:
        mono = clock.monotonic()
        b = self.board
        if b is None or b.full_at is None or self.full_every <= 0 or mono - b.full_at >= self.full_every \
                or not b.apply(store, self.max_changed):
            b = _Board()
            self.board = None  # a read that raises leaves no half-built board behind
            b.full(store, mono)
            if len(b.tickets) >= FREEZE_AT and self.full_every > 0:
                _freeze()
        self.board = b
        return b

    def gather(self, root, store, policy, clock, runtime=None, *, host: str = HOST, ports=None) -> Snapshot:
        return _gather(self, root, store, policy, clock, runtime, host=host, ports=ports)


def _gather(g: Gatherer, root, store, policy, clock, runtime=None, *, host: str = HOST, ports=None) -> Snapshot:
    root = g.root(root)
    if ports is None:
        ports = REAL_PORTS
    src = _Sources()
    now = clock.now()
    board = src.get("tickets", lambda: g._board(store, clock), None)
    if board is None:
        g.board = None
        src.failed.update({"proposals", "attempts"})
    tickets = board.ordered if board else ()
    by_id = board.tickets if board else {}

    prev_views = g.views
    norm = g.norm

    def _agents():
        views = []
        keep = {}
        for a in store.agents():
            code = None
            if a.state == "running":
                alive, paused = liveness(a, runtime, host)
                if alive is False:
                    code = ended_with(a, runtime, host)
            else:
                alive, paused = False, False
            # the same view object for an unchanged agent: the core tells what changed between ticks by identity
            v = prev_views.get(a.id)
            if v is None or v.agent is not a or v.alive is not alive or v.paused is not paused or v.exit_code != code:
                last_commit = (a.data or {}).get("last_commit_at")
                v = AgentView(a, alive, paused, float(last_commit) if last_commit else None, code)
            keep[a.id] = v
            views.append(v)
        g.views = keep
        return views

    agents = src.get("agents", _agents, [])
    live_wt = {norm(v.agent.worktree) for v in agents
               if v.agent.worktree and v.agent.state == "running" and v.alive is not False}

    def _worktrees():
        views = []
        wts = store.worktrees()
        # only orphan candidates are worth the process table and git: their ticket is over or gone, nobody in them
        cand: dict[str, Path] = {}  # worktree path -> its real path (resolved once per tick)
        real = Resolver()  # the worktrees share their folders: each resolved once
        for wt in wts:
            t = by_id.get(wt.ticket_id) if wt.ticket_id else None
            if (t is None or t.state in lifecycle.TERMINAL) and norm(wt.path) not in live_wt and os.path.isdir(wt.path):
                cand[wt.path] = real(wt.path)
        busy = ports.processes.busy(list(cand.values())) if cand else {}
        prev = g.wt_views
        keep = {}
        for wt in wts:
            exists = os.path.exists(wt.path)
            files: tuple[str, ...] = ()
            pids: tuple[int, ...] = ()
            if busy and exists and _over(by_id, wt):
                rp = cand.get(wt.path) or Path(wt.path).resolve()
                pids = busy.get(rp, ())
                if rp in busy:
                    try:
                        files = tuple(ports.git.untracked(rp)) if ports.git.is_toplevel(rp) else ()
                    except Exception:  # noqa: BLE001 - one unreadable worktree says nothing about the rest
                        src.failed.add("worktrees")
            v = prev.get(wt.path)
            if v is None or v.exists is not exists or v.busy_pids != pids or v.unknown_files != files or v.worktree != wt:
                v = WorktreeView(wt, exists, pids, files)
            keep[wt.path] = v
            views.append(v)
        g.wt_views = keep
        return views

    worktrees = src.get("worktrees", _worktrees, [])
    proposals = board.proposals if board else ()
    attempts = board.budget if board else {}

    def _settings():
        return store.get_settings((
            keys.DISPATCH_PAUSED, keys.DISPATCH_PAUSED_REASON, keys.MAIN_STATUS, keys.MAIN_RED_SINCE, keys.DISPATCH_LAST_LAUNCH,
            keys.SUPERVISOR_LAST_TICK, keys.DISPATCH_LAST_TICK))

    settings = src.get("dispatch", _settings, None)
    if settings is None:
        src.failed.update({"main", "supervisor"})
        settings = {}
    main_status = settings.get(keys.MAIN_STATUS) or "unknown"
    if main_status not in ("green", "red"):
        main_status = "unknown"

    opened = [p.created_at for p in proposals]
    closed = [p.decided_at for p in proposals if p.decided_at is not None and p.state in ("merged", "rejected")]
    merged = frozenset(board.merged) if board else frozenset()
    registered = {norm(w.worktree.path) for w in worktrees}
    loose = src.get("files", lambda: _loose_files(root, registered), ())
    spend = src.get("spend", lambda: _spend(store, policy, now), ()) if policy.sentinels.spend_rate is not None else ()
    halted = (root / ".healer" / "HALT").exists() or bool(policy.remediation.observe_only)
    paused_reason = settings.get(keys.DISPATCH_PAUSED_REASON)
    return Snapshot(
        now=now,
        tickets=tuple(tickets),
        agents=tuple(agents),
        worktrees=tuple(worktrees),
        proposals=tuple(proposals),
        attempts=dict(attempts),  # the board keeps changing; a snapshot must not
        merged_tickets=merged,
        # a human's reopen (done -> queued) makes the merge history, not a zombie; merged again, it is done again
        reopened=frozenset(t for t in (board.reopened if board else ()) if t in by_id and by_id[t].state != lifecycle.DONE),
        main_status=main_status,
        main_red_since=settings.get(keys.MAIN_RED_SINCE),
        dispatch_paused=bool(settings.get(keys.DISPATCH_PAUSED)),
        dispatch_paused_by=paused_reason if paused_reason else None,
        pool_size=policy.fleet.pool_size,
        last_launch_at=settings.get(keys.DISPATCH_LAST_LAUNCH),
        last_open_at=max(opened) if opened else None,
        last_close_at=max(closed) if closed else None,
        last_supervisor_tick=settings.get(keys.SUPERVISOR_LAST_TICK),
        last_dispatch_tick=settings.get(keys.DISPATCH_LAST_TICK),
        dispatcher_alive=src.get("dispatch", lambda: _lease_alive(store, "dispatcher", host, ports.processes), None),
        unknown_files=tuple(loose),
        halted=halted,
        spend=tuple(spend),
        failed_sources=frozenset(src.failed),
        notes={"source_errors": dict(src.errors)} if src.errors else {},
    )
