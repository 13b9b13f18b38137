"""Fleet fixtures: a real git repo as the fleet root, a real store, the scripted loop stand-in as the agent."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from healer.clock import VirtualClock
from healer.fleet.dispatcher import Dispatcher
from healer.fleet.process_runtime import ProcessRuntime
from healer.policy.schema import Policy
from healer.store import open_store
from tests.conftest import git, make_repo

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "chaos" / "agents" / "fleet_agent.py"


def gate(name: str, code: str, timeout: str = "30s") -> dict:
    return {"name": name, "run": [sys.executable, "-c", code], "timeout": timeout}


NO_FILE = "import os, sys; sys.exit(1 if os.path.exists({!r}) else 0)"


def scripted_policy(*, pool_size: int = 4, merge_gates=(), main_gates=(), agent_args=(), **retry) -> Policy:
    cmd = [sys.executable, str(AGENT), "--policy", "{policy}", "--task", "{task_file}", "--workdir", "{workdir}",
           "--root", "{root}", "--run-id", "{run_id}", *agent_args]
    data = {"fleet": {"pool_size": pool_size, "loop_command": cmd, "merge_gates": list(merge_gates),
                      "main_gates": list(main_gates), "dispatch_tick": "30s"},
            "loop": {"kill_grace": "2s"}, "notify": {"notifiers": [{"kind": "jsonl", "path": ".healer/notifications.jsonl"}]}}
    if retry:
        data["retry"] = retry
    return Policy.model_validate(data)


@dataclass
class Fleet:
    root: Path
    clock: VirtualClock
    store: object
    policy: Policy
    d: Dispatcher

    def add(self, tid: str, behaviour: str = "success", priority: int = 2, blocked_by=(), **kw):
        return self.store.add_ticket(f"ticket {tid}", id=tid, body=f"behaviour: {behaviour}\n", priority=priority,
                                     blocked_by=blocked_by, **kw)

    def state(self, tid: str) -> str:
        return self.store.ticket(tid).state

    def settle(self, timeout: float = 30.0) -> None:
        assert self.d.wait_idle(timeout), "agents did not exit in time"

    def running(self, tid: str | None = None):
        return [a for a in self.store.agents(states=["running"]) if tid is None or a.ticket_id == tid]

    def main_head(self) -> str:
        return git(self.root, "rev-parse", "main")

    def events(self, kind: str, subject: str | None = None):
        return self.store.events(kinds=[kind], subject=subject)


def make_fleet(tmp_path: Path, policy: Policy, clock: VirtualClock | None = None) -> Fleet:
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir(exist_ok=True)
    clock = clock or VirtualClock()
    store = open_store(root, clock)
    d = Dispatcher(root, policy, store, clock, ProcessRuntime())
    return Fleet(root, clock, store, policy, d)


@pytest.fixture
def fleet_factory(tmp_path):
    made: list[Fleet] = []

    def make(policy: Policy | None = None, sub: str = "f") -> Fleet:
        f = make_fleet(tmp_path / sub, policy or scripted_policy())
        made.append(f)
        return f

    yield make
    for f in made:
        f.d.stop_agents(grace=1.0)
        f.store.close()
