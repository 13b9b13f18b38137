"""Acceptance 2 and 3: a real MCP client sees exactly the whitelist; an adversary is refused at every turn."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio
import pytest

from healer import actions, procs
from healer.records import Worktree
from healer.remedy.limiter import record_human
from healer.repair import launcher
from healer.repair.server import READ_TOOLS, TOOLS
from healer.store import open_store
from tests.repair.conftest import PY, child_env, past_store, tree_hash, write_policy


def by_name(tools) -> set[str]:
    return {t.name for t in tools}


def test_real_client_lists_exactly_the_whitelisted_tools(fleet: Path):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def session():
        params = StdioServerParameters(command=PY, args=["-m", "healer", "mcp", "serve", "--root", str(fleet), "--run-id", "R-list"],
                                       env=child_env())
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            tools = (await s.list_tools()).tools
            status = await s.call_tool("fleet_status", {})
            return tools, status

    tools, status = anyio.run(session)
    assert sorted(t.name for t in tools) == sorted(TOOLS)
    # the read tools and every action whose spec offers a tool (unblock_ticket since issue 35): the registry's count
    assert len(tools) == len(READ_TOOLS) + sum(s.tool is not None for s in actions.specs()) and "unblock_ticket" in by_name(tools)
    by = {t.name: t for t in tools}
    assert by["drop_label"].input_schema["required"] == ["ticket_ids", "label"]
    assert by["unblock_ticket"].input_schema["required"] == ["ticket_ids"] and "reason" in by["unblock_ticket"].input_schema["properties"]
    for t in tools:
        assert t.input_schema["type"] == "object"
        assert t.description
    ro = {t.name for t in tools if t.annotations and t.annotations.read_only_hint}
    assert ro == {"fleet_status", "list_findings", "get_ticket", "journal_tail", "list_worktrees"}
    assert status.is_error is False
    assert status.structured_content["calls_left"] == 19
    s = open_store(fleet)
    try:
        calls = s.events(kinds=["repair.call"], subject="R-list")
        assert [e.payload["tool"] for e in calls] == ["fleet_status"]
    finally:
        s.close()


ADVERSARY_POLICY = """\
version: 1
remediation:
  rate_limits:
    drop_label: {count: 2, per: 1h}
repair_agent:
  timeout: 2m
  max_tool_calls: 20
  agent:
    preset: command
    command: [@py, -m, chaos.agents.repair_adversary, --config, "{mcp_config}", --decoy, @decoy,
              --symlink, link-out, --busy-worktree, @wt, --quiet-ticket, T-Q,
              --burst, "T-B1,T-B2,T-B3,T-B4", --label, to-review]
"""


@pytest.fixture
def hostile_fleet(fleet: Path, tmp_path: Path):
    decoy = tmp_path / "decoy"
    (decoy / "sub").mkdir(parents=True)
    (decoy / "secret.txt").write_text("do not touch\n")
    (decoy / "sub" / "more.bin").write_bytes(bytes(range(256)))
    (fleet / "link-out").symlink_to(decoy / "secret.txt")
    wt = fleet / "worktrees" / "T-9"
    wt.mkdir(parents=True)
    (wt / "notes.txt").write_text("work in progress\n")
    store, clock = past_store(fleet, hours=6)
    store.add_ticket("done long ago", id="T-9", state="closed")
    store.add_worktree(Worktree(str(wt), "T-9", "healer/T-9", clock.now()))
    store.add_ticket("recently touched by a human", id="T-Q", state="queued")
    store.move_ticket("T-Q", "in_progress", actor="dispatcher")
    for i in range(1, 5):
        store.add_ticket(f"stuck in review {i}", id=f"T-B{i}", state="queued")
        store.move_ticket(f"T-B{i}", "in_progress", actor="dispatcher")
        store.move_ticket(f"T-B{i}", "review", actor="dispatcher")
        store.label(f"T-B{i}", "to-review", actor="dispatcher")
    store.close()
    now_store = open_store(fleet)
    record_human(now_store, "T-Q", "requeue")  # a human acted on T-Q just now: its quiet period runs
    now_store.close()
    policy = write_policy(fleet, ADVERSARY_POLICY.replace("@py", PY).replace("@decoy", str(decoy)).replace("@wt", "worktrees/T-9"))
    busy = subprocess.Popen(["sleep", "120"], cwd=wt)
    try:
        yield fleet, decoy, wt, policy
    finally:
        busy.kill()
        busy.wait()


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_adversary_is_refused_every_time_and_nothing_outside_changes(hostile_fleet, monkeypatch):
    fleet, decoy, wt, policy = hostile_fleet
    before = tree_hash(decoy)
    store = open_store(fleet)
    try:
        res = launcher.launch(fleet, policy, store, reason="adversarial test", env=child_env())
        out = json.loads(Path(res.scratch, "agent.out").read_text())
        assert res.exit_code == 0, Path(res.scratch, "agent.err").read_text()[-2000:]
        assert out["listed"] == sorted(TOOLS)
        by = {}
        for a in out["attempts"]:
            by.setdefault(a["attempt"], []).append(a)
        assert len(out["attempts"]) == 21

        def whole(name: str) -> str:
            (a,) = by[name]
            assert a["is_error"] and a["payload"]["refused"], a
            return a["payload"]["reason"]

        def items(name: str) -> list[dict]:
            (a,) = by[name]
            return a["payload"]["results"]

        assert "unknown tool 'run_shell'" in whole("unknown_tool")
        assert "expected a ticket id" in whole("shell_metachar")
        trav = items("traversal")
        assert [r["status"] for r in trav] == ["refused", "refused"]
        assert all("'..'" in r["reason"] for r in trav)
        (absr,) = items("absolute_outside")
        assert absr["status"] == "refused" and "outside" in absr["reason"]
        (sym,) = items("symlink_outside")
        assert sym["status"] == "refused" and "symlink" in sym["reason"]
        (busy,) = items("busy_worktree")
        assert busy["status"] in ("refused", "aborted") and "in use" in busy["reason"]
        (quiet,) = items("quiet_period")
        assert quiet["status"] == "refused" and "quiet period" in quiet["reason"]
        burst = items("rate_limit_burst")
        assert [r["status"] for r in burst] == ["done", "done", "refused", "refused"]
        assert all("rate limit" in r["reason"] for r in burst[2:])
        assert all(not a["is_error"] for a in by["read"])
        assert "budget spent" in whole("past_max") and "call 21" in whole("past_max")

        # nothing outside the fleet changed; nothing inside that should stay did move
        assert tree_hash(decoy) == before
        assert (fleet / "link-out").is_symlink() and wt.is_dir() and (wt / "notes.txt").exists()
        assert store.ticket("T-Q").state == "in_progress"
        assert [("to-review" in store.ticket(f"T-B{i}").labels) for i in range(1, 5)] == [False, False, True, True]

        # every call and every refusal is in the event log, reason for reason
        calls = store.events(kinds=["repair.call"], subject=res.run_id)
        assert len(calls) == 21 and [e.payload["call"] for e in calls] == list(range(1, 22))
        logged = [e.payload["reason"] for e in store.events(kinds=["repair.refused"]) if e.payload.get("run") == res.run_id]
        expected = [whole(n) for n in ("unknown_tool", "shell_metachar")] + [r["reason"] for r in trav] + \
                   [absr["reason"], sym["reason"], busy["reason"], quiet["reason"]] + [r["reason"] for r in burst[2:]] + \
                   [whole("past_max")]
        assert sorted(logged) == sorted(expected)
        assert res.calls == 21 and res.done == 2
        assert sorted(res.touched) == ["T-B1", "T-B2"]
        for tid in ("T-B1", "T-B2"):
            (c,) = [c for c in store.comments(tid) if c.author == "repair-agent"]
            assert res.run_id in c.body and "drop_label: done" in c.body
    finally:
        store.close()
    assert not procs.busy_pids(Path(res.scratch) / "cwd")
