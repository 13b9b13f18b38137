"""Synthetic snapshots: small builders for tests and a seeded fleet generator for the
benchmark and simulations. Pure (a seeded Random, no clock)."""

from __future__ import annotations

import random
from typing import Any

from healer.core.model import AgentView, Snapshot, WorktreeView
from healer.records import Agent, Attempt, Proposal, Ticket, Worktree

T0 = 1_700_000_000.0


def ticket(id: str, state: str = "queued", *, at: float = T0, labels: dict[str, float] | None = None,
           blocked_by: tuple[str, ...] = (), data: dict[str, Any] | None = None, created_at: float | None = None) -> Ticket:
    return Ticket(id=id, title=f"ticket {id}", state=state, labels=dict(labels or {}), blocked_by=tuple(blocked_by),
                  created_at=at if created_at is None else created_at, updated_at=at, data=dict(data or {}))


def agent(id: str, ticket_id: str | None, *, at: float = T0, alive: bool | None = True, paused: bool = False,
          state: str = "running", worktree: str | None = None, pid: int = 4242, heartbeat_at: float | None = None,
          progress_at: float | None = None) -> AgentView:
    a = Agent(id=id, ticket_id=ticket_id, state=state, pid=pid, host="h", worktree=worktree, started_at=at,
              heartbeat_at=at if heartbeat_at is None else heartbeat_at, progress_at=at if progress_at is None else progress_at)
    return AgentView(agent=a, alive=alive, paused=paused)


def worktree(path: str, ticket_id: str | None, *, at: float = T0, exists: bool = True, busy: tuple[int, ...] = (),
             unknown: tuple[str, ...] = ()) -> WorktreeView:
    return WorktreeView(worktree=Worktree(path=path, ticket_id=ticket_id, branch=f"healer/{ticket_id}", created_at=at),
                        exists=exists, busy_pids=tuple(busy), unknown_files=tuple(unknown))


def attempt(n: int, ticket_id: str, *, at: float = T0, kind: str = "launch", head: str | None = None,
            state_hash: str | None = None) -> Attempt:
    return Attempt(id=n, ticket_id=ticket_id, kind=kind, at=at, head=head, state_hash=state_hash)


def fleet(n_tickets: int = 10_000, n_agents: int = 1_000, n_worktrees: int = 1_000, *, seed: int = 7,
          now: float = T0 + 86_400, pool_size: int | None = None) -> Snapshot:
    """A busy fleet: mostly done tickets, n_agents live agents on in-progress tickets, and a
    sprinkling (about 1%) of every finding kind, so every detector does real work."""
    rnd = random.Random(seed)
    tickets: list[Ticket] = []
    agents: list[AgentView] = []
    wts: list[WorktreeView] = []
    attempts: dict[str, tuple[Attempt, ...]] = {}
    proposals: list[Proposal] = []
    merged: set[str] = set()
    aid = 0
    for i in range(n_tickets):
        tid = f"T-{i + 1}"
        created = now - rnd.uniform(3_600, 80_000)
        if i < n_agents:  # in progress with a live agent and a worktree
            path = f"worktrees/{tid}"
            last = now - rnd.uniform(0, 1_200)
            tickets.append(ticket(tid, "in_progress", at=created, created_at=created))
            kind = i % 100
            alive = kind != 1  # 1% dead
            prog = now - 6_000 if kind == 2 else (now - 2_400 if kind == 3 else last)  # stuck, idle
            agents.append(agent(f"A-{aid}", tid, at=created, alive=alive, worktree=path, heartbeat_at=prog, progress_at=prog))
            aid += 1
            if i < n_worktrees and i % 20 != 5:  # 5% of live agents lost their worktree: room for orphans
                wts.append(worktree(path, tid, at=created))
            attempts[tid] = tuple(attempt(j, tid, at=created + j, head=f"h{i}" if kind == 4 else f"h{i}-{j}", state_hash="s")
                                  for j in range(2))
            continue
        r = i % 100
        if r == 0:
            tickets.append(ticket(tid, "in_progress", at=now - 3_600, created_at=created))  # frozen
        elif r == 1:
            tickets.append(ticket(tid, "queued", at=now - 10_000, labels={"to-review": now - 10_000}, created_at=created))
        elif r == 2:
            tickets.append(ticket(tid, "queued", at=now - 100, data={"merged_commit": "abc"}, created_at=created))  # zombie
        elif r == 3:  # a two-ticket dependency cycle
            tickets.append(ticket(tid, "queued", at=created, blocked_by=(f"T-{i + 2}",), created_at=created))
        elif r == 4:
            tickets.append(ticket(tid, "queued", at=created, blocked_by=(f"T-{i}",), created_at=created))
        elif r < 20:
            tickets.append(ticket(tid, "queued", at=now - rnd.uniform(0, 7_200), created_at=created))
        elif r < 22:
            tickets.append(ticket(tid, "review", at=now - 600, created_at=created))
            proposals.append(Proposal(len(proposals) + 1, tid, f"healer/{tid}", "c0ffee", "open", now - 600))
        else:
            tickets.append(ticket(tid, "done", at=now - rnd.uniform(0, 80_000), created_at=created))
    # orphan worktrees: the rest of the worktree budget goes to done tickets
    done = [t for t in tickets if t.state == "done"]
    for k in range(max(0, n_worktrees - len(wts))):
        t = done[k % len(done)]
        wts.append(worktree(f"worktrees/{t.id}-{k}", t.id, at=now - 90_000,
                            unknown=("notes.txt",) if k % 3 == 0 else (), busy=(99,) if k % 50 == 0 else ()))
    return Snapshot(
        now=now, tickets=tuple(tickets), agents=tuple(agents), worktrees=tuple(wts), proposals=tuple(proposals),
        attempts=attempts, merged_tickets=frozenset(merged), pool_size=pool_size or n_agents,
        last_launch_at=now - 300, last_open_at=now - 600, last_close_at=now - 900, last_supervisor_tick=now - 30,
        unknown_files=("worktrees/stray.txt",),
    )
