"""`include_runbooks` in a fleet's healer.yaml turns runbooks into the rules the supervisor enforces."""

import json

from tests.conftest import healer, make_repo

RUNBOOK = """---
id: only-tell-about-stale-labels
when: stale_label
for: 0s
do: [notify]
---
# Only tell

## Symptom
A label nobody removes.
## Cause
A reviewer who left.
## What healer does
Tells the channel, touches nothing.
## What a human does
Removes the label.
"""


def _plan(root):
    r = healer("plan", "--json", cwd=root)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_runbook_rule_replaces_the_default_rule(tmp_path):
    root = make_repo(tmp_path / "fleet")
    assert healer("init", cwd=root).returncode == 0
    assert healer("board", "add", "stuck", cwd=root).returncode == 0
    assert healer("board", "label", "T-1", "to-review", cwd=root).returncode == 0  # a human touch: quiet period
    (root / "healer.yaml").write_text("health:\n  stale_labels: {to-review: 0s}\n")
    default = _plan(root)
    assert [d["action"] for d in default["deferred"]] == ["drop_label"]  # the default rule, held by the quiet period

    (root / "rb").mkdir()
    (root / "rb" / "tell.md").write_text(RUNBOOK)
    (root / "healer.yaml").write_text("health:\n  stale_labels: {to-review: 0s}\ninclude_runbooks: [rb/]\n")
    ruled = _plan(root)
    assert ruled["deferred"] == [] and ruled["actions"] == []
    assert [a["key"] for a in ruled["alerts"]] == ["stale_label:T-1"]


def test_broken_runbook_is_a_located_input_error(tmp_path):
    root = make_repo(tmp_path / "fleet")
    assert healer("init", cwd=root).returncode == 0
    (root / "rb").mkdir()
    (root / "rb" / "bad.md").write_text(RUNBOOK.replace("do: [notify]", "do: [reboot]"))
    (root / "healer.yaml").write_text("include_runbooks: [rb/]\n")
    r = healer("plan", cwd=root)
    assert r.returncode == 65
    assert "bad.md:5:" in r.stderr and "reboot" in r.stderr and "Traceback" not in r.stderr
