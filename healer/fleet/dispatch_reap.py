"""The dispatcher's reaping: every agent this host launched whose process ended gets its attempt closed.

`Reaper` is the Dispatcher's collaborator (healer/fleet/dispatcher.py) for it. An ended agent's attempt is closed with its exit
code, failure signature, HEAD, state hash and gate-log tail, and its ticket moved (exit 0 opens a proposal,
anything else requeues it), in one store transaction; an in-progress ticket without a live agent (a dispatcher
killed mid-launch) is adopted back (its agent found by id) or requeued.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from healer import conventions as cv
from healer import lifecycle, switches
from healer.clock import Clock
from healer.core import dispatch_steps as steps
from healer.core import endings
from healer.core import fleet as fleet_rules
from healer.core import hosts as host_rules
from healer.fleet import shared_main
from healer.fleet.dispatch_board import ACTOR, Identity, TicketMover, agent_id_for, handle_of, ours
from healer.fleet.ports import Git, Processes
from healer.fleet.results import read_result as _read_result
from healer.fleet.runtime import RUNNING, Runtime
from healer.records import Agent, Attempt, Ticket
from healer.store import keys
from healer.store.base import Store
from healer.store.sqlite import pid_alive

if TYPE_CHECKING:
    from healer.policy.schema import Policy

branch_for, worktree_for = cv.branch_for, cv.worktree_for


class Reaper:
    """Closes the attempts of the agents this host launched that ended, takes back what an earlier host id of this
    machine left (issue 40), and requeues or adopts the in-progress tickets without a live agent."""

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

    def reap(self, orphans: bool = True, workers: int = 1) -> list[str]:
        """Close the attempts of the agents that ended. `workers` > 1 closes them side by side (each costs a few git
        calls for HEAD and the state hash): the reaper thread does, so a burst of exits is not reaped one by one."""
        done, ended = [], []
        for a in self.store.agents(states=["running"]):
            if not ours(a) or a.host != self.me.host:
                continue
            st = self.runtime.status(handle_of(a))
            over, code = steps.ended_code(st.state, st.exit_code)
            if over:
                ended.append((a, code))
                done.append(a.id)
        if workers > 1 and len(ended) > 1:
            with ThreadPoolExecutor(min(workers, len(ended)), thread_name_prefix="reap") as pool:
                list(pool.map(lambda x: self._ended(*x), ended))
        else:
            for a, code in ended:
                self._ended(a, code)
        # agents someone else already recorded as lost (the supervisor's bookkeeping) still owe us their attempt
        for a in self.store.agents_to_reap(self.me.host):
            step = steps.to_reap(ours(a) and a.host == self.me.host, a.data.get("reaped_by"),
                                 bool(a.data.get("stopped_here")), bool(a.data.get("reaped")))
            if step == steps.STOP_RECLAIMED:
                self._stop_reclaimed(a)
            elif step == steps.CLOSE:
                self._ended(a, a.exit_code, record_agent=False)
                done.append(a.id)
        if orphans:  # not from the reaper thread: a launch in flight would look like an orphan
            self._reconcile_orphans()
        return done

    def take_back(self) -> list[str]:
        """This host restarted under a new id (HEALER_HOST_ID changed): the agents and claims its earlier id
        recorded on this machine (same boot, same fleet root: healer/core/hosts.py taken_back) become this id's, so
        the reaping below adopts the running ones and closes the exited ones with their result (read from their
        run folder), once. Without it they stayed `running` under a host id nobody dispatches as: in progress for
        good, or until a lease expiry requeued work that had already committed."""
        if not self.me.machine or not switches.enabled("host_takeback"):
            return []
        rows = [a for a in self.store.agents(states=["running"]) + self.store.agents_to_reap(None) if ours(a)]
        tickets = self.store.tickets(states=[lifecycle.IN_PROGRESS])
        olds = {a.host for a in rows} | {(t.data or {}).get("host") for t in tickets}
        tb = host_rules.taken_back(rows, tickets, self.me.host, self.me.machine,
                                   [h for h in olds if h and h != self.me.host and self._host_alive(h)])
        if not tb.agents and not tb.tickets:
            return []
        by_id = {a.id: a for a in rows}
        with self.store.tx():
            for aid in tb.agents:
                a = by_id[aid]
                self.store.update_agent(aid, host=self.me.host, data={**a.data, "host_before": a.host, "machine": self.me.machine})
                self.store.append("dispatch.host_taken_back", a.ticket_id or aid, {
                    "agent": aid, "from": a.host, "to": self.me.host, "state": a.state})
            for tid in tb.tickets:
                self.store.set_ticket_data(tid, host=self.me.host)
        return list(tb.agents)

    def _host_alive(self, host: str) -> bool:
        """Whether another dispatcher holds that host's lease now (several hosts on one root and machine): its rows
        stay its own. A lease never taken (one host) or expired, fenced, or held by a dead pid is no one's."""
        lease = self.store.lease(host_rules.lease_name(host))
        if lease is None or not steps.lease_held(lease.holder, lease.expires_at, self.clock.now(), host_rules.FENCED):
            return False
        return pid_alive(lease.pid)

    def _stop_reclaimed(self, a: Agent) -> None:
        """This host was given up (lost, its lease expired) and its tickets requeued: an agent of it that still runs
        works for nobody now and must not race the ticket's new attempt in this worktree."""
        running = self.runtime.status(handle_of(a)).state == RUNNING
        if running:
            self.runtime.stop(handle_of(a), self.policy.loop.kill_grace)
        self.store.update_agent(a.id, data={**a.data, "stopped_here": True})
        self.store.append("dispatch.reclaimed_agent_stopped", a.ticket_id or a.id, {"agent": a.id, "was_running": running,
                                                                                     "reclaimed_by": a.data.get("reaped_by")})

    def _reconcile_orphans(self) -> None:
        """An in-progress ticket this dispatcher took but that has no live agent (a crash mid-launch) goes back to the queue."""
        live = {a.ticket_id for a in self.store.agents(states=["running"])}
        for t in self.store.tickets(states=[lifecycle.IN_PROGRESS]):
            if not steps.orphan_candidate(t.id in live, (t.data or {}).get("host", self.me.host), self.me.host,
                                          bool(self.shared)):
                continue  # a live agent, or another host's claim (its launch may be in flight)
            open_atts = [x for x in self.store.attempts(t.id) if x.ended_at is None]
            moves = [] if open_atts else self.store.events(kinds=["ticket.moved"], subject=t.id)
            if not fleet_rules.owns_orphan(False, len(open_atts), moves[-1].payload.get("actor") if moves else None):
                continue  # a human or another tool put it in progress: the supervisor's rules judge it
            if any(self._adopt(t, x) for x in open_atts):
                continue
            for x in open_atts:  # its dispatcher died mid-launch: the run never started, no budget counts it
                self.store.finish_attempt(x.id, failure_signature=steps.ORPHAN_SIGNATURE)
            self.mover.move(t.id, lifecycle.QUEUED, "in progress without a live agent", expect=lifecycle.IN_PROGRESS)

    def _adopt(self, t: Ticket, att: Attempt) -> bool:
        """A dispatcher killed between starting an agent and registering it left it running unseen:
        find it by the agent id in its environment and register it, rather than start a second one."""
        agent_id = agent_id_for(t.id, att.id)
        p = self.processes.find_agent(self.root, agent_id, att.run_id)
        if p is None:
            return False
        now = self.clock.now()
        wt = worktree_for(self.root, t.id)
        self.store.upsert_agent(Agent(
            id=agent_id, ticket_id=t.id, state="running", kind="process", pid=p.pid, host=self.me.host,
            run_id=att.run_id, worktree=str(wt), started_at=now, heartbeat_at=now, progress_at=now,
            data={"launched_by": ACTOR, "attempt": att.id, "marker": p.marker, "launch": att.kind,
                  "log": str(self.root / ".healer" / "logs" / "agents" / f"{agent_id}.log"), "head": att.head,
                  "dispatcher": self.me.holder, "adopted": True, "process_started": p.started, "machine": self.me.machine},
        ))
        self.store.append("dispatch.adopted", t.id, {"agent": agent_id, "pid": p.pid, "attempt": att.id})
        return True

    def _ended(self, a: Agent, code: int | None, record_agent: bool = True) -> None:
        res = _read_result(a.worktree, a.run_id)
        head, state_hash = self.git.state(a.worktree) if a.worktree else (None, None)
        end = steps.attempt_end(code, res, _log_tail(a.data.get("log"), self.policy.fleet.evidence_lines),
                                stopped=a.state == "stopped", launcher_died=a.data.get("dispatcher") in self._crashed(),
                                infra_endings=switches.enabled("infra_endings"))
        code, sig, ending, tail = end.exit_code, end.signature, end.ending, end.tail
        now = self.clock.now()
        att_id = a.data.get("attempt")
        # one transaction: a dispatcher killed halfway leaves the agent unreaped (reaped again), never half-recorded
        with self.store.tx():
            if att_id is not None and a.ticket_id is not None and any(
                    x.id == att_id and x.ended_at is None for x in self.store.attempts(a.ticket_id)):
                self.store.finish_attempt(att_id, ended_at=now, exit_code=code, failure_signature=sig, state_hash=state_hash,
                                          head=head, gate_log_tail=tail)
                if ending.infra:
                    self.store.append("attempt.infra", a.ticket_id or a.id, {
                        "attempt": att_id, "agent": a.id, "cause": ending.cause, "exit_code": code,
                        "detail": " ".join(ending.detail.split())[:300]})
            if record_agent:
                self.store.update_agent(a.id, state=fleet_rules.agent_end_state(code), ended_at=now, exit_code=code)
            self.store.update_agent(a.id, data={**a.data, "reaped": True})
            self._close_ticket_of(a, code, head, sig)
        forget = getattr(self.runtime, "forget", None)
        if forget:
            forget(handle_of(a))

    def _crashed(self) -> set[str]:
        return set(self.store.get_setting(keys.DISPATCH_CRASHED) or [])

    def _close_ticket_of(self, a: Agent, code: int | None, head: str | None, sig: str | None) -> None:
        if a.ticket_id is None:
            return  # an agent on no ticket: closed, nothing to move
        try:
            t = self.store.ticket(a.ticket_id)
        except Exception:  # noqa: BLE001 - the ticket was deleted by hand; the agent is closed anyway
            return
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
