"""The repair agent's tool names (healer/repair/server.py serves them; healer/repair/launcher.py whitelists them in
the agent's command line). Their own module, below both: the launcher, which the fleet's ports start, never imports
the server, which runs remedies through the executor that gathers snapshots through those ports."""

from __future__ import annotations

from collections.abc import Sequence

from healer import actions as registry

READ_TOOLS = ("fleet_status", "list_findings", "get_ticket", "journal_tail", "list_worktrees")
ACTION_TOOLS = registry.Names(lambda s: s.tool is not None)  # live: the specs that offer a tool


class _Tools(Sequence[str]):
    """READ_TOOLS then ACTION_TOOLS, live (an action registered later is offered too)."""

    def _now(self) -> tuple[str, ...]:
        return READ_TOOLS + tuple(ACTION_TOOLS)

    def __getitem__(self, i):
        return self._now()[i]

    def __len__(self) -> int:
        return len(self._now())

    def __contains__(self, x: object) -> bool:
        return x in READ_TOOLS or x in ACTION_TOOLS


TOOLS = _Tools()
