"""Acceptance 5: a red main pauses dispatch; it resumes within one tick of main turning green."""

from __future__ import annotations

import json

from tests.conftest import git
from tests.fleet.conftest import NO_FILE, gate, scripted_policy


def commit_on_main(f, *, add: dict | None = None, rm: list | None = None, msg: str = "change") -> str:
    for name, text in (add or {}).items():
        (f.root / name).write_text(text)
        git(f.root, "add", name)
    for name in rm or []:
        git(f.root, "rm", "-q", name)
    git(f.root, "commit", "-q", "-m", msg)
    return f.main_head()


def test_red_main_pauses_dispatch_until_green(fleet_factory):
    f = fleet_factory(scripted_policy(main_gates=[gate("main-ok", NO_FILE.format("RED"))], pool_size=1))
    f.add("T-1", "success")
    f.add("T-2", "success")
    assert f.d.tick().main == "green"
    f.settle()
    commit_on_main(f, add={"RED": "x\n"}, msg="break main")
    went_red = f.clock.now()  # the next tick sees it
    for _ in range(3):
        rep = f.d.tick()
        assert rep.main == "red" and rep.launched == []
        f.clock.advance(60)
    assert f.store.get_setting("dispatch.paused") is True
    assert f.store.get_setting("main.status") == "red"
    assert f.store.get_setting("main.red_since") == went_red  # not moved by the later red ticks
    assert len(f.events("main.red")) == 1 and len(f.events("dispatch.paused")) == 1
    # T-1's proposal is held (not gated) while main is red
    assert f.state("T-1") == "review" and f.state("T-2") == "queued"
    # the supervisor's main_red sentinel pages under the same key: one page per condition, not two
    sent = [e for e in f.events("notify.sent") if e.subject == "main_red:main"]
    assert len(sent) == 1
    lines = [json.loads(x) for x in (f.root / ".healer" / "notifications.jsonl").read_text().splitlines()]
    assert any(x["key"] == "main_red:main" for x in lines)

    commit_on_main(f, rm=["RED"], msg="fix main")
    rep = f.d.tick()
    assert rep.main == "green"
    assert rep.merged == ["T-1"] and rep.launched == [("T-2", "launch")]  # within one tick of green
    assert f.store.get_setting("dispatch.paused") is False
    assert len(f.events("main.green")) == 1 and len(f.events("dispatch.resumed_dispatch")) == 1
    # no launch ever happened while main was red
    red_at = f.events("main.red")[0].id
    green_at = f.events("main.green")[0].id
    assert not [e for e in f.store.events(prefix="dispatch.launched") if red_at < e.id < green_at]


def test_main_gates_rerun_only_when_main_moves_while_green(fleet_factory):
    f = fleet_factory(scripted_policy(main_gates=[gate("main-ok", NO_FILE.format("RED"))]))
    f.d.tick()
    checked = f.store.get_setting("main.checked_commit")
    f.d.tick()
    assert f.store.get_setting("main.checked_commit") == checked == f.main_head()
    new = commit_on_main(f, add={"x.txt": "1\n"})
    f.d.tick()
    assert f.store.get_setting("main.checked_commit") == new


def test_pause_set_by_someone_else_is_not_lifted_by_green_main(fleet_factory):
    f = fleet_factory(scripted_policy())
    f.add("T-1")
    f.store.set_setting("dispatch.paused", True)
    f.store.set_setting("dispatch.paused_reason", "supervisor")
    assert f.d.tick().launched == []
    f.store.set_setting("dispatch.paused", False)
    assert f.d.tick().launched == [("T-1", "launch")]
