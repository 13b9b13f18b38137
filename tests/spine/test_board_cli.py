"""The board through the CLI: add, list, show, label, comment, move, states; errors are one line."""

from __future__ import annotations

import json

import pytest

from healer.init import init_fleet
from healer.store import open_store
from tests.conftest import healer


@pytest.fixture
def fleet(tmp_path):
    init_fleet(tmp_path)
    return tmp_path


@pytest.fixture
def ok(cli, fleet):
    def run(*args, input=None):
        r = cli(*args, cwd=fleet, input=input)
        assert r.code == 0, f"{args}: {r.err}"
        return r
    return run


def test_add_list_show_label_comment_move(ok):
    assert ok("board", "add", "fix the build", "--priority", "1", "--label", "ci").out.strip() == "T-1 queued: fix the build"
    ok("board", "add", "docs", "--id", "DOC-1", "--blocked-by", "T-1", "--body", "explain it")
    added = json.loads(ok("board", "add", "later", "-P", "5", "--json").out)
    assert added["id"] == "T-3" and added["priority"] == 5 and added["state"] == "queued"

    listed = json.loads(ok("board", "list", "--json").out)
    assert [t["id"] for t in listed] == ["T-1", "DOC-1", "T-3"]  # serving order: priority, then age
    assert listed[1]["blocked_by"] == ["T-1"] and listed[0]["labels"][0]["label"] == "ci"
    table = ok("board", "list").out
    assert "fix the build" in table and "DOC-1" in table and "ci (" in table

    ok("board", "label", "T-1", "to-review")
    assert "nothing to do" in ok("board", "label", "T-1", "to-review").out
    ok("board", "label", "T-1", "ci", "--remove")
    ok("board", "comment", "T-1", "looks stuck on the lockfile")
    ok("board", "comment", "T-1", "-", input="from stdin\n")
    assert ok("board", "move", "T-1", "in_progress", "--reason", "picking it up").out.strip() == "T-1: queued -> in_progress"

    shown = json.loads(ok("board", "show", "T-1", "--json").out)
    assert shown["ticket"]["state"] == "in_progress"
    assert [lb["label"] for lb in shown["ticket"]["labels"]] == ["to-review"] and shown["ticket"]["labels"][0]["age_s"] >= 0
    assert [c["body"] for c in shown["comments"]] == ["looks stuck on the lockfile", "from stdin\n"]
    assert all(c["author"] == "human" for c in shown["comments"])
    assert shown["attempts"] == [] and shown["proposals"] == [] and shown["agents"] == []
    kinds = [e["kind"] for e in shown["events"]]
    assert kinds[0] == "ticket.created" and "ticket.moved" in kinds and "human.action" in kinds
    docs = json.loads(ok("board", "show", "DOC-1", "--json").out)
    assert docs["blockers"] == {"T-1": "in_progress"} and docs["ticket"]["body"] == "explain it"

    text = ok("board", "show", "T-1").out
    assert "to-review" in text and "looks stuck" in text and "recent events" in text

    only = json.loads(ok("board", "list", "--state", "in_progress", "--json").out)
    assert [t["id"] for t in only] == ["T-1"]


def test_show_lists_attempts_proposals_agents(ok, fleet):
    ok("board", "add", "work")
    s = open_store(fleet)
    try:
        s.add_attempt("T-1", "launch", run_id="r1", head="abc")
        s.add_proposal("T-1", "healer/T-1", "0123456789abcdef")
    finally:
        s.close()
    shown = json.loads(ok("board", "show", "T-1", "--json").out)
    assert [a["kind"] for a in shown["attempts"]] == ["launch"]
    assert [p["branch"] for p in shown["proposals"]] == ["healer/T-1"]
    text = ok("board", "show", "T-1").out
    assert "attempts" in text and "proposals" in text and "healer/T-1" in text


def test_human_actions_are_recorded_for_the_quiet_period(ok, fleet):
    ok("board", "add", "x")
    ok("board", "label", "T-1", "urgent")
    ok("board", "label", "T-1", "urgent")  # no change: not an action
    ok("board", "comment", "T-1", "hello")
    ok("board", "move", "T-1", "blocked", "--reason", "waiting on infra")
    ok("board", "label", "T-1", "urgent", "--remove")
    s = open_store(fleet)
    try:
        acts = s.events(kinds=["human.action"], subject="T-1")
        assert [e.payload["action"] for e in acts] == ["add", "label", "comment", "move", "unlabel"]
        assert all(e.payload["actor"] == "human" for e in acts)
        assert acts[3].payload == {"action": "move", "actor": "human", "from": "queued", "to": "blocked", "reason": "waiting on infra"}
        assert s.events(kinds=["ticket.moved"], subject="T-1")[0].payload["actor"] == "human"
        assert [e.payload["actor"] for e in s.events(kinds=["ticket.labeled", "ticket.unlabeled"])] == ["human", "human"]
    finally:
        s.close()


ERRORS = [
    (("board", "show", "T-9"), 64, "no ticket 'T-9'"),
    (("board", "move", "T-9", "done"), 64, "no ticket 'T-9'"),
    (("board", "move", "T-1", "done"), 65, "cannot move queued -> done; from queued a ticket may go to"),
    (("board", "move", "T-1", "doing"), 65, "unknown state 'doing'"),
    (("board", "label", "T-9", "x"), 64, "no ticket 'T-9'"),
    (("board", "label", "T-1", "two words"), 65, "expected a word without spaces"),
    (("board", "comment", "T-1", "  "), 65, "expected some text"),
    (("board", "comment", "T-9", "hi"), 64, "no ticket 'T-9'"),
    (("board", "add", "dup", "--id", "T-1"), 65, "ticket T-1 already exists"),
    (("board", "add", "bad id", "--id", "../x"), 65, "--id: expected letters"),
    (("board", "add", ""), 65, "expected some text"),
    (("board", "add", "dep", "--blocked-by", "NOPE"), 65, "expected existing ticket ids, got unknown NOPE"),
    (("board", "add", "p", "--priority", "high"), 64, "priority"),
    (("board", "list", "--state", "doing"), 64, "--state: expected one of"),
    (("board", "frobnicate"), 64, "frobnicate"),
]


def test_errors_are_one_line_with_the_right_code(ok, cli, fleet):
    ok("board", "add", "first")
    for args, code, needle in ERRORS:
        r = cli(*args, cwd=fleet)
        assert r.code == code, (args, r.err)
        lines = r.err.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], (args, r.err)
        assert "Traceback" not in r.err
    assert open_store(fleet).ticket("T-1").state == "queued"


def test_real_process_errors_and_not_a_fleet(fleet, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    r = healer("board", "list", cwd=elsewhere)
    assert r.returncode == 64 and "not a healer fleet" in r.stderr and "healer init" in r.stderr
    assert healer("board", "add", "from afar", "--root", str(fleet), cwd=elsewhere).returncode == 0
    r = healer("board", "list", "--json", cwd=elsewhere, env={"HEALER_ROOT": str(fleet)})
    assert [t["title"] for t in json.loads(r.stdout)] == ["from afar"]
    r = healer("board", "move", "T-1", "review", cwd=fleet)
    assert r.returncode == 65 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_markup_in_titles_prints_as_written(ok):
    ok("board", "add", "[WIP] [bold]x[/bold]")
    assert "[WIP] [bold]x[/bold]" in json.loads(ok("board", "show", "T-1", "--json").out)["ticket"]["title"]
    assert "[WIP]" in ok("board", "list").out and "[bold]" in ok("board", "show", "T-1").out


def test_states_prints_mermaid(ok):
    out = ok("board", "states", "--mermaid").out
    assert out.startswith("stateDiagram-v2") and "queued --> in_progress: launch" in out


def test_text_that_is_not_utf8_is_exit_65_naming_where_and_nothing_is_written(fleet):
    import os
    import subprocess

    from tests.conftest import PY

    assert healer("board", "add", "A", cwd=fleet).returncode == 0
    bad = os.fsdecode(b"\xff")  # the byte reaches healer as it would from a shell: $'\xff'
    for args, where in ((["board", "add", bad], "board add: title"), (["board", "add", "t", "--body", bad], "board add: --body"),
                        (["board", "comment", "T-1", bad], "board comment: TEXT"), (["board", "label", "T-1", bad], "board: label")):
        r = healer(*args, cwd=fleet)
        assert r.returncode == 65, (args, r.stderr)
        assert r.stderr == f"healer: {where}: expected UTF-8 text, got a byte that is not UTF-8 at character 1\n", r.stderr
    r = subprocess.run([PY, "-m", "healer", "board", "comment", "T-1", "-"], cwd=fleet, input=b"\xff\xfe bad",
                       capture_output=True, timeout=120)
    assert r.returncode == 65 and r.stderr.decode().startswith("healer: board comment: ") and b"UTF-8" in r.stderr, r.stderr
    s = open_store(fleet)
    try:
        assert [t.title for t in s.tickets()] == ["A"] and s.comments("T-1") == [] and s.ticket("T-1").labels == {}
    finally:
        s.close()


def test_a_priority_the_store_cannot_keep_is_refused_up_front(cli, fleet):
    r = cli("board", "add", "t", "--priority", "99999999999999999999", cwd=fleet)
    assert r.code == 64 and r.err.startswith("healer: board add: --priority: expected a whole number from ") and "internal" not in r.err
    assert cli("board", "add", "t", "--priority", str(2**63 - 1), cwd=fleet).code == 0
