"""Demerzel import: the real fixture converts into a policy healer accepts."""

from __future__ import annotations

import re

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from healer.errors import InvalidInput
from healer.policy import load_policy
from healer.policy.demerzel import convert, read_lenient
from tests.conftest import healer


def test_fixture_converts_to_a_valid_policy(tmp_path, demerzel_fixture):
    r = healer("policy", "import", "demerzel", str(demerzel_fixture))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "imported.yaml"
    out.write_text(r.stdout)
    v = healer("policy", "validate", str(out))
    assert v.returncode == 0, v.stderr
    p = load_policy(out)
    assert (p.loop.max_iterations, p.loop.absolute_max, p.loop.stall.same_state) == (10, 25, 3)
    assert p.loop.iteration_timeout == 20 * 60
    # convergence_check: halt_and_escalate; a repeated output is a hint (docs/loop.md), no progress is what stops
    assert p.loop.stall.duplicate_output == "flag"


def test_output_says_what_it_added_and_what_it_could_not_map(demerzel_fixture):
    out = convert(demerzel_fixture.read_bytes(), str(demerzel_fixture))
    timeout_line = next(ln for ln in out.splitlines() if ln.strip().startswith("iteration_timeout:"))
    assert "not in the source" in timeout_line
    assert re.search(r"#.*no per-iteration timeout", out)
    assert "max_iterations: 10" in out and "# iteration_limits.default_max" in out
    assert "same_state: 3" in out and "stall_limit" in out
    for value in ("halt_and_escalate", "halt_immediately", "immediate_halt", "escalate_to_human"):
        assert re.search(rf"#.*{value} -> ", out), value
    # every top-level section of the source shows up: mapped, or listed as a comment
    src = read_lenient(demerzel_fixture.read_text())
    assert {"iteration_limits", "risk_classification", "agentic_patterns", "self_merge_authority"} <= set(src.data)
    for key in src.data:
        assert key in out, f"{key} dropped silently"
    # and the Markdown prose did not become keys
    assert not [k for k in src.data if " " in k]


def test_no_iteration_limits_is_exit_65(tmp_path):
    f = tmp_path / "other.yaml"
    f.write_text("name: something-else\n---\n## Heading\n\nprose: only\n")
    r = healer("policy", "import", "demerzel", str(f))
    assert r.returncode == 65
    assert r.stderr.strip().startswith(f"{f}:1:1: iteration_limits: expected a Demerzel loop policy with loop bounds (an "
                                       "iteration_limits section, or bounds such as max cycles per day")
    assert r.stderr.strip().endswith("got none") and r.stderr.count("\n") == 1
    assert r.stdout == ""


def test_iteration_limits_not_a_mapping_is_located(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("name: x\n\n## Limits\n\niteration_limits: 10\n")
    r = healer("policy", "import", "demerzel", str(f))
    assert r.returncode == 65
    assert r.stderr.startswith(f"{f}:5:1: iteration_limits: expected a mapping")


def test_unknown_format_and_missing_file(tmp_path):
    r = healer("policy", "import", "ralph", str(tmp_path / "x.yaml"))
    assert r.returncode == 64 and "known: demerzel" in r.stderr
    r = healer("policy", "import", "demerzel", str(tmp_path / "missing.yaml"))
    assert r.returncode == 65 and "cannot read" in r.stderr and "Traceback" not in r.stderr


def test_out_of_range_values_are_capped_and_said():
    src = b"iteration_limits:\n  default_max: 40\n  absolute_max: 5000\n  stall_limit: zero\n  iteration_timeout: 45m\n  budget: 3\n"
    out = convert(src, "s.yaml")
    p = yaml.safe_load(out)
    assert p["loop"]["absolute_max"] == 1000 and p["loop"]["max_iterations"] == 40
    assert p["loop"]["iteration_timeout"] == "45m" and "ADDED" not in out
    assert "stall_limit = zero" in out and "budget = 3" in out
    src2 = b"iteration_limits:\n  default_max: 40\n"
    p2 = yaml.safe_load(convert(src2, "s.yaml"))
    assert p2["loop"]["max_iterations"] == 25  # healer's absolute_max default caps it


LINES = st.one_of(
    st.sampled_from(["---", "## Heading", "iteration_limits:", "  default_max: 10", "  absolute_max: 25", "  stall_limit: 3",
                     "  rules:", "    - halt", "failure_action: halt_and_escalate", "- item", "prose line: with colon",
                     "key: [unclosed", "\tTab: x", "  - {a: 1}", "", "x: &a 1", "y: *b"]),
    st.text(max_size=30),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(LINES, max_size=30))
def test_lenient_reader_never_crashes(lines):
    raw = "\n".join(lines).encode("utf-8", errors="replace")
    try:
        out = convert(raw, "f.yaml")
    except InvalidInput as e:
        assert all(line.startswith("f.yaml:") for line in e.lines)
        return
    assert "iteration_timeout" in out


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=400))
def test_binary_input_never_crashes(raw):
    # garbage is refused with located lines (exit 65), never a traceback
    try:
        convert(raw, "f.yaml")
    except InvalidInput as e:
        assert all(line.startswith("f.yaml:") for line in e.lines), e.lines


FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "demerzel"


def _imported(tmp_path, name: str):
    r = healer("policy", "import", "demerzel", str(FIXTURES / name))
    assert r.returncode == 0, r.stderr
    out = tmp_path / f"{name}.healer.yaml"
    out.write_text(r.stdout)
    assert healer("policy", "validate", str(out)).returncode == 0
    return load_policy(out), r.stdout


def test_bounds_in_a_markdown_table_are_read(tmp_path):
    # the real seldon-plan policy: its bounds sit in a "Resource Bounds" table, its lock in prose
    p, out = _imported(tmp_path, "seldon-plan-policy.yaml")
    assert p.loop.max_iterations_per_day == 6  # Max cycles per day
    assert p.loop.iteration_timeout == 30 * 60  # Max duration per cycle: 30 minutes
    assert p.loop.kill_switch == "state/seldon-plan/kill.switch"
    assert p.loop.max_iterations == 12  # Max consecutive auto-cycles -> the iteration cap
    assert p.supervisor.lease_ttl == 30 * 60  # lock younger than 30min
    # the fenced GitHub Actions snippet is not policy: its `on:` / `schedule` never become keys
    assert "\non:" not in out and "True" not in out and "cron" not in out
    # every section it did not map is listed, and the other rows of the bounds table
    for name in ("constitutional_basis", "Cross-Model Validation Protocol", "Observability", "Active hours (UTC)",
                 "ChatGPT calls per cycle"):
        assert name in out, name


def test_fenced_code_is_never_read_as_policy():
    from healer.policy import demerzel_bounds as db

    text = FIXTURES.joinpath("seldon-plan-policy.yaml").read_text()
    src = read_lenient("\n".join(db.unfenced(text)))
    assert True not in src.data and "on" not in src.data and "jobs" not in src.data
    assert not any(str(k) in ("priority", "RESEARCH_FINDING") for k in src.data)


def test_a_markdown_policy_with_front_matter_and_bullets(tmp_path):
    p, out = _imported(tmp_path, "seldon-plan-SKILL.md")
    assert (p.loop.max_iterations_per_day, p.loop.max_iterations, p.loop.kill_switch) == (6, 12, "state/seldon-plan/kill.switch")
    assert p.supervisor.lease_ttl == 30 * 60  # the error-handling table: Lock held > 30min
    assert "ADDED: not in the source" in out  # no per-cycle duration there: healer's deadline is added, and said
    assert "section 'Usage'" in out and "section 'Cycle Pipeline'" in out
