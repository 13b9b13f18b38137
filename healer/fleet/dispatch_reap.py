"""The dispatcher's reaping: every agent this host launched whose process ended gets its attempt closed.

`Reaper` is the Dispatcher's collaborator (healer/fleet/dispatcher.py) for it: it gathers the views the pure pass
asks for (healer/core/dispatch_pass.py `reap`, `take_back`, `heartbeat`: which agents ended, what they left, the
in-progress tickets without a live agent) and carries out the steps it decides. An ended agent's attempt is closed
with its exit code, failure signature, HEAD, state hash and gate-log tail, and its ticket moved (exit 0 opens a
proposal, anything else requeues it), in one store transaction; an in-progress ticket without a live agent (a
dispatcher killed mid-launch) is adopted back (its agent found by id) or requeued.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from healer import conventions as cv
from healer import lifecycle, switches
from healer.clock import Clock
from healer.core import dispatch_pass as P
from healer.core import dispatch_steps as steps
from healer.core import endings
from healer.core import hosts as host_rules
from healer.fleet import shared_main
from healer.fleet.dispatch_board import ACTOR, Identity, TicketMover, agent_id_for, handle_of, ours
from healer.fleet.ports import Git, Processes
from healer.fleet.results import read_result as _read_result
from healer.fleet.runtime import RUNNING, Runtime
from healer.records import Agent
from healer.store.base import Store
from healer.store.sqlite import pid_alive

if TYPE_CHECKING:
    from healer.policy.schema import Policy

branch_for, worktree_for = cv.branch_for, cv.worktree_for


class Reaper:
    """Gathers what the pure pass (healer/core/dispatch_pass.py) asks of this host's agents, and carries out its
    reaping steps: an earlier host id's rows taken back (issue 40), ended attempts closed, agents someone else
    reclaimed stopped, orphans adopted or requeued, the live ones' heartbeats."""

    def __init__(self, store: Store, runtime: Runtime, git: Git, processes: Processes, policy: Policy, root: Path, *,
                 clock: Clock, me: Identity, mover: TicketMover, shared: str | None) -> None:
        self.store = store
        self.runtime = runtime
        self.git = git
        self.processes = processes
        self.policy = policy
        self.root = root
        self.clock = clock
        self.me = me
        self.mover = mover
        self.shared = shared

    def answers(self) -> dict[type, Callable[[Any], Any]]:
        """The pass's steps this collaborator answers (healer/fleet/dispatcher.py routes them)."""
        return {P.ReadTakeBack: lambda _s: self.read_takeback(), P.TakeBack: self.take_back,
                P.ReadRunning: lambda s: self.read_running(s.heads), P.ReadEnds: lambda s: self.read_ends(s.agents),
                P.ReadToReap: lambda _s: tuple(self.store.agents_to_reap(self.me.host)), P.CloseAttempt: self.close,
                P.StopReclaimed: lambda s: self._stop_reclaimed(s.agent), P.ReadOrphans: lambda _s: self.read_orphans(),
                P.FindAgent: lambda s: self.processes.find_agent(self.root, agent_id_for(s.ticket, s.attempt.id),
                                                                  s.attempt.run_id),
                P.Adopt: self.adopt, P.RequeueOrphan: self.requeue_orphan, P.Heartbeat: self.heartbeat}

    # -- reads --------------------------------------------------------------------------------------------------------
    def read_running(self, heads: bool = False) -> tuple[P.Seen, ...]:
        """This host's running agents as the runtime sees them; `heads`: a running one's worktree HEAD too."""
        out = []
        for a in self.store.agents(states=["running"]):
            if not ours(a) or a.host != self.me.host:
                continue
            st = self.runtime.status(handle_of(a))
            head = None
            if heads and st.state == RUNNING:
                head = self.git.rev(a.worktree) if a.worktree and os.path.isdir(a.worktree) else None
            out.append(P.Seen(a, st.state, st.exit_code, head))
        return tuple(out)

    def read_ends(self, agents: tuple[Agent, ...], workers: int = 1) -> tuple[P.EndSeen, ...]:
        """What each ended agent left. `workers` > 1 reads them side by side (each costs a few git calls for HEAD and
        the state hash): the exit watch does, so a burst of exits is not read one by one."""
        if workers > 1 and len(agents) > 1:
            with ThreadPoolExecutor(min(workers, len(agents)), thread_name_prefix="reap") as pool:
                return tuple(pool.map(self._end_seen, agents))
        return tuple(self._end_seen(a) for a in agents)

    def _end_seen(self, a: Agent) -> P.EndSeen:
        res = _read_result(a.worktree, a.run_id)
        head, state_hash = self.git.state(a.worktree) if a.worktree else (None, None)
        # the evidence of work is a commit main does not hold yet, read from git, never the agent's exit code: a
        # ticket's branch starts at main, so an agent that committed nothing leaves a HEAD main already has
        new = head is not None and not self.git.contains(self.root, self.policy.fleet.main_branch, head)
        return P.EndSeen(res, head, state_hash, _log_tail(a.data.get("log"), self.policy.fleet.evidence_lines), new)

    def read_takeback(self) -> P.TakeBackView:
        rows = tuple(a for a in self.store.agents(states=["running"]) + self.store.agents_to_reap(None) if ours(a))
        tickets = tuple(self.store.tickets(states=[lifecycle.IN_PROGRESS]))
        olds = {a.host for a in rows} | {(t.data or {}).get("host") for t in tickets}
        return P.TakeBackView(rows, tickets, {h: self._lease(h) for h in olds if h and h != self.me.host},
                              self.clock.now())

    def _lease(self, host: str) -> P.HostLease | None:
        lease = self.store.lease(host_rules.lease_name(host))
        return None if lease is None else P.HostLease(lease.holder, lease.expires_at, pid_alive(lease.pid))

    def read_orphans(self) -> tuple[P.OrphanView, ...]:
        """The in-progress tickets, each with whether an agent runs on it, its open attempts and (none open) who last
        moved it."""
        live = {a.ticket_id for a in self.store.agents(states=["running"])}
        out = []
        for t in self.store.tickets(states=[lifecycle.IN_PROGRESS]):
            if t.id in live:
                out.append(P.OrphanView(t, True, (), None))
                continue
            open_atts = tuple(x for x in self.store.attempts(t.id) if x.ended_at is None)
            moves = [] if open_atts else self.store.events(kinds=["ticket.moved"], subject=t.id)
            out.append(P.OrphanView(t, False, open_atts, moves[-1].payload.get("actor") if moves else None))
        return tuple(out)

    # -- effects ------------------------------------------------------------------------------------------------------
    def take_back(self, step: P.TakeBack) -> None:
        """The agents and claims an earlier host id of this machine recorded become this id's (one transaction)."""
        with self.store.tx():
            for a in step.agents:
                self.store.update_agent(a.id, host=self.me.host, data={**a.data, "host_before": a.host, "machine": self.me.machine})
                self.store.append("dispatch.host_taken_back", a.ticket_id or a.id, {
                    "agent": a.id, "from": a.host, "to": self.me.host, "state": a.state})
            for tid in step.tickets:
                self.store.set_ticket_data(tid, host=self.me.host)

    def _stop_reclaimed(self, a: Agent) -> None:
        """This host was given up (lost, its lease expired) and its tickets requeued: an agent of it that still runs
        works for nobody now and must not race the ticket's new attempt in this worktree."""
        running = self.runtime.status(handle_of(a)).state == RUNNING
        if running:
            self.runtime.stop(handle_of(a), self.policy.loop.kill_grace)
        self.store.update_agent(a.id, data={**a.data, "stopped_here": True})
        self.store.append("dispatch.reclaimed_agent_stopped", a.ticket_id or a.id, {"agent": a.id, "was_running": running,
                                                                                     "reclaimed_by": a.data.get("reaped_by")})

    def requeue_orphan(self, step: P.RequeueOrphan) -> None:
        for aid in step.attempts:  # its dispatcher died mid-launch: the run never started, no budget counts it
            self.store.finish_attempt(aid, failure_signature=steps.ORPHAN_SIGNATURE)
        self.mover.move(step.ticket, lifecycle.QUEUED, "in progress without a live agent", expect=lifecycle.IN_PROGRESS)

    def adopt(self, step: P.Adopt) -> None:
        """A dispatcher killed between starting an agent and registering it left it running unseen: it was found by
        the agent id in its environment and is registered, rather than a second one started."""
        t, att, p = step.ticket, step.attempt, step.process
        agent_id = agent_id_for(t, att.id)
        now = self.clock.now()
        wt = worktree_for(self.root, t)
        self.store.upsert_agent(Agent(
            id=agent_id, ticket_id=t, state="running", kind="process", pid=p.pid, host=self.me.host,
            run_id=att.run_id, worktree=str(wt), started_at=now, heartbeat_at=now, progress_at=now,
            data={"launched_by": ACTOR, "attempt": att.id, "marker": p.marker, "launch": att.kind,
                  "log": str(self.root / ".healer" / "logs" / "agents" / f"{agent_id}.log"), "head": att.head,
                  "dispatcher": self.me.holder, "adopted": True, "process_started": p.started, "machine": self.me.machine},
        ))
        self.store.append("dispatch.adopted", t, {"agent": agent_id, "pid": p.pid, "attempt": att.id})

    def heartbeat(self, step: P.Heartbeat) -> None:
        # one write transaction for the whole fleet, taken after the runtime and git calls so it holds the lock briefly
        with self.store.tx():
            for a, head, moved in step.beats:
                self.store.heartbeat(a.id, progress=moved)
                if moved:
                    self.store.update_agent(a.id, data={**a.data, "head": head})

    def close(self, step: P.CloseAttempt) -> None:
        """Close an ended agent's attempt as the core decided, in one transaction: a dispatcher killed halfway leaves
        the agent unreaped (reaped again), never half-recorded."""
        a, end = step.agent, step.end
        now = self.clock.now()
        att_id = a.data.get("attempt")
        with self.store.tx():
            # re-read inside the transaction, right before writing: the attempt may have been closed meanwhile (a
            # retried pass, the exit watch): only an open one is finished
            if att_id is not None and a.ticket_id is not None and any(
                    x.id == att_id and x.ended_at is None for x in self.store.attempts(a.ticket_id)):
                self.store.finish_attempt(att_id, ended_at=now, exit_code=end.exit_code, failure_signature=end.signature,
                                          state_hash=step.state_hash, head=step.head, gate_log_tail=end.tail)
                if end.ending.infra:
                    self.store.append("attempt.infra", a.ticket_id or a.id, {
                        "attempt": att_id, "agent": a.id, "cause": end.ending.cause, "exit_code": end.exit_code,
                        "detail": " ".join(end.ending.detail.split())[:300]})
            if step.agent_state is not None:
                self.store.update_agent(a.id, state=step.agent_state, ended_at=now, exit_code=end.exit_code)
            self.store.update_agent(a.id, data={**a.data, "reaped": True})
            self._close_ticket_of(a, end.exit_code, step.proposed, end.signature)
        forget = getattr(self.runtime, "forget", None)
        if forget:
            forget(handle_of(a))

    def _close_ticket_of(self, a: Agent, code: int | None, head: str | None, sig: str | None) -> None:
        if a.ticket_id is None:
            return  # an agent on no ticket: closed, nothing to move
        try:
            t = self.store.ticket(a.ticket_id)
        except Exception:  # noqa: BLE001 - the ticket was deleted by hand; the agent is closed anyway
            return
        # where the ticket goes is the core's rule (dispatch_steps.close_move), judged here on the ticket and its
        # attempts re-read inside the closing transaction: a human, the supervisor or a later attempt may have
        # moved it since the pass's view was read, and their move stands
        att_id = a.data.get("attempt")
        atts = self.store.attempts(t.id) if att_id is not None and t.state == lifecycle.IN_PROGRESS else []
        move = steps.close_move(t.state, att_id, atts[-1].id if atts else None, a.id, code, head, sig)
        if move is None:
            return  # someone else (a human, the supervisor) took the ticket elsewhere, or a later attempt owns it
        if self.mover.move(t.id, move.to, move.reason, expect=lifecycle.IN_PROGRESS) and move.propose and head:
            if self.shared and a.worktree and not shared_main.publish(a.worktree, branch_for(t.id), head, self.shared):
                self.store.append("dispatch.publish_failed", t.id, {"remote": self.shared, "commit": head})
            self.store.add_proposal(t.id, branch_for(t.id), head)


def ending_of(code: int | None, res: dict | None, log_tail: str, sig: str | None) -> endings.Ending:
    """How a reaped agent's attempt ended (healer/core/dispatch_steps.py `ending_of`), under the game day's
    `infra_endings` switch (chaos: model-endpoint-down proves infra endings matter)."""
    return steps.ending_of(code, res, log_tail, sig, infra_endings=switches.enabled("infra_endings"))


def _log_tail(path: str | None, n: int) -> str:
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-n:])
