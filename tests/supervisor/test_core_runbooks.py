"""Runbooks as policy: parsing with located errors, the shipped set, and `healer runbook check|new`."""

from __future__ import annotations

from pathlib import Path

from healer.core import decide
from healer.core.model import Memory, Snapshot
from healer.core.rules import DEFAULT_RULES, effective
from healer.core.runbooks import check, parse, rules_from_runbooks, template, with_rules
from healer.policy.schema import Policy
from healer.policy_in_force import policy_with_runbooks, read_texts
from tests.conftest import REPO, healer
from tests.synth import T0, ticket

SHIPPED = REPO / "runbooks"

GOOD = """---
id: gentle-requeue
when: frozen_in_progress
for: 5m
do: [requeue_ticket]
escalate_after: 2
---
# Gentle requeue
## Symptom
x
## Cause
x
## What healer does
x
## What a human does
x
"""


def test_shipped_runbooks_are_the_default_rules():
    rules, errors = rules_from_runbooks(read_texts([SHIPPED]))
    assert errors == []
    assert {r.id: r for r in rules} == {r.id: r for r in DEFAULT_RULES}
    assert check(read_texts([SHIPPED])) == []
    for name in ("requeue-frozen", "drop-stale-label", "close-zombie", "resume-dead-agent", "stop-stuck-agent",
                 "remove-orphan-worktree", "quarantine-unknown-file", "break-wait-cycle", "escalate-same-commit",
                 "pause-on-red-main"):
        assert (SHIPPED / f"{name}.md").is_file(), name


def test_parse_good_runbook():
    rule, errors = parse("rb.md", GOOD)
    assert errors == [] and rule.id == "gentle-requeue" and rule.for_ == 300 and rule.escalate_after == 2


def test_errors_are_located_in_the_whole_file():
    bad = GOOD.replace("when: frozen_in_progress", "when: frozen").replace("for: 5m", "for: soon")
    rule, errors = parse("rb.md", bad)
    assert rule is None
    assert errors[0].startswith("rb.md:3:1: when: expected ") and "got 'frozen'" in errors[0]
    assert errors[1].startswith("rb.md:4:1: for: ")


def test_unknown_key_and_inapplicable_action():
    _r, errors = parse("rb.md", GOOD.replace("escalate_after: 2", "escalate_after: 2\nsevirity: high"))
    assert len(errors) == 1 and errors[0].startswith("rb.md:7:1: sevirity: expected a known key")
    _r, errors = parse("rb.md", GOOD.replace("do: [requeue_ticket]", "do: [requeue_ticket, remove_worktree]"))
    assert errors == ["rb.md:5:22: do[1]: expected an action that applies to frozen_in_progress "
                      "(escalate, notify, requeue_ticket), got remove_worktree"]


def test_missing_front_matter_yaml_error_duplicates_and_sections():
    assert parse("a.md", "# no front matter\n")[1][0].startswith("a.md:1:1: (front matter): expected")
    assert parse("a.md", "---\nid: x\n")[1][0].startswith("a.md:1:1:")
    _r, errors = parse("a.md", "---\nid: [x\n---\n")
    assert errors[0].startswith("a.md:") and "expected valid YAML" in errors[0]
    rules, errors = rules_from_runbooks([("a.md", GOOD), ("b.md", GOOD)])
    assert len(rules) == 1 and errors == ["b.md:2:1: id: expected a unique rule id, got 'gentle-requeue' again (first in a.md)"]
    rules, errors = rules_from_runbooks([("a.md", GOOD), ("b.md", GOOD.replace("id: gentle-requeue", "id: other"))])
    assert len(rules) == 1 and errors == ["b.md:3:1: when: expected one runbook per finding kind, got a second one for "
                                          "frozen_in_progress (first in a.md)"]
    errs = check([("c.md", GOOD.replace("## Cause", "## Reason"))])
    assert errs == ["c.md:8:1: (prose): expected the sections Symptom, Cause, What healer does, What a human does, "
                    "got none named Cause"]


def test_policy_rules_win_over_runbooks_which_win_over_defaults():
    own = Policy.model_validate({"rules": [{"id": "mine", "when": "frozen_in_progress", "do": ["escalate"]}]})
    rb, _ = rules_from_runbooks([("rb.md", GOOD)])
    eff = effective(with_rules(own, rb))
    assert eff["frozen_in_progress"].id == "mine"
    assert effective(with_rules(Policy(), rb))["frozen_in_progress"].id == "gentle-requeue"
    s = Snapshot(now=T0 + 600, tickets=(ticket("T-1", "in_progress"),))
    d = decide(s, with_rules(Policy(), rb), Memory())
    assert d.actions == () and "debounce" in d.deferred[0][1]  # the runbook's `for: 5m` is enforced


def test_policy_with_runbooks_reads_include_runbooks(tmp_path: Path):
    (tmp_path / "rb").mkdir()
    (tmp_path / "rb" / "gentle.md").write_text(GOOD)
    p = policy_with_runbooks(Policy.model_validate({"include_runbooks": "rb/"}), tmp_path)
    assert [r.id for r in p.rules] == ["gentle-requeue"]


def test_template_passes_check():
    for when in ("frozen_in_progress", "main_red", "orphan_worktree"):
        assert check([("t.md", template("my-rule", when))]) == []


def test_cli_check_and_new(tmp_path: Path):
    r = healer("runbook", "check", str(SHIPPED))
    assert r.returncode == 0, r.stderr
    assert f"{len(list(SHIPPED.glob('*.md')))} runbook(s) ok" in r.stdout
    r = healer("runbook", "new", "slow-requeue", "--dir", str(tmp_path / "rb"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "rb" / "slow-requeue.md").is_file()
    assert healer("runbook", "check", str(tmp_path / "rb")).returncode == 0
    r = healer("runbook", "new", "slow-requeue", "--dir", str(tmp_path / "rb"))
    assert r.returncode == 64 and "already exists" in r.stderr
    (tmp_path / "rb" / "bad.md").write_text(GOOD.replace("id: gentle-requeue", "id: bad").replace("do: [requeue_ticket]", "do: [reboot]"))
    r = healer("runbook", "check", str(tmp_path / "rb"))
    assert r.returncode == 65
    assert f"{tmp_path / 'rb' / 'bad.md'}:5:" in r.stderr and "got 'reboot'" in r.stderr and "Traceback" not in r.stderr
    r = healer("runbook", "check", str(tmp_path / "nope"))
    assert r.returncode == 65 and r.stderr.count("\n") == 1
