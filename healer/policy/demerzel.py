"""`healer policy import demerzel FILE`: a Demerzel autonomous-loop policy as a healer policy.

Demerzel's `autonomous-loop-policy.yaml` is not YAML as a whole: `---` separates
documents that mix Markdown headings and prose with YAML blocks. So the reader is
lenient: each top-level `key:` block (the key line plus its indented body) is parsed
on its own, and what is not YAML is skipped. The converter then writes a commented
healer policy: what maps, where from; what healer adds (the per-iteration deadline
Demerzel lacks); and every key it could not map, as comments, never silently dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from healer import durations
from healer.errors import InvalidInput
from healer.policy import demerzel_bounds as db
from healer.policy.load import validate_text
from healer.policy.schema import HARD_MAX_ITERATIONS, Loop
from healer.policy.yamlpos import OverLimit, YamlProblem, load_one

_DOC_SEP = re.compile(r"^---[ \t]*$")
# Demerzel keys are snake_case; "Note: ..." prose at column 0 must not pass for a key
_TOP_KEY = re.compile(r"^([a-z_][a-z0-9_-]*):(?:[ \t]|$)")

# what healer does for each Demerzel failure action
FAILURE_ACTIONS: dict[str, str] = {
    "halt_and_escalate": "the run stops (exit 3, or 2 on a spent budget) and the ticket is labelled needs-human",
    "halt_immediately": "the run stops at once (exit 3)",
    "immediate_halt": "the run stops at once (exit 3); an operator can also create the kill-switch file (exit 4)",
    "escalate_to_human": "escalate: needs-human label, evidence comment, notification",
    "halt": "the run stops (exit 3)",
    "escalate": "escalate: needs-human label, evidence comment, notification",
}
# how close healer comes to each Demerzel check
CHECKS: dict[str, str] = {
    "review_criteria.convergence_check": "stall detection (loop.stall) measures progress from outside",
    "review_criteria.regression_check": "no regression detector; gates run every iteration and loop.protected_paths reverts edits to tests/",
    "review_criteria.drift_check": "no goal-drift detector; an iteration whose diff exceeds loop.max_diff_lines is rolled back",
}
_HALTS = {"halt_and_escalate", "halt_immediately", "immediate_halt", "halt"}

# why a top-level Demerzel section has no healer key
_UNMAPPED_WHY: dict[str, str] = {
    "name": "metadata",
    "version": "metadata (the source's own version)",
    "effective_date": "metadata",
    "description": "metadata",
    "references": "links to other Demerzel documents",
    "rationale": "version history",
    "risk_classification": "healer has no risk tiers; use a stricter policy file per risk instead",
    "governance_modes": "healer checks every iteration with gates (closest to per_iteration); there is no boundary-only mode",
    "demerzel_initiated_loops": "who may start loops is outside healer",
    "domain_work_authorization": "authorisation artefacts are outside healer (the board holds tickets, not their provenance)",
    "constitutional_integration": "constitutional articles have no machine-checkable healer form",
    "agentic_patterns": "a reference catalogue, not settings",
}


@dataclass
class Lenient:
    data: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)  # top-level key -> line in the source
    skipped: list[str] = field(default_factory=list)  # blocks that looked like YAML but were not


def _blocks(lines: list[str], first: int) -> list[tuple[int, str]]:
    """Top-level `key:` blocks of one document: the key line, then indented, blank and `- ` lines."""
    out: list[tuple[int, str]] = []
    cur: list[str] | None = None
    start = 0
    for i, line in enumerate(lines):
        if _TOP_KEY.match(line):
            if cur is not None:
                out.append((start, "\n".join(cur)))
            cur, start = [line], first + i
        elif cur is not None and (not line.strip() or line[:1] in (" ", "\t") or line.startswith("- ")):
            cur.append(line)
        elif cur is not None:
            # a heading or a paragraph ends the block
            out.append((start, "\n".join(cur)))
            cur = None
    if cur is not None:
        out.append((start, "\n".join(cur)))
    return out


def read_lenient(text: str, source: str = "-") -> Lenient:
    """Every top-level YAML block of a YAML/Markdown mixture; later documents win on repeats."""
    result = Lenient()
    lines = text.splitlines()
    docs: list[tuple[int, list[str]]] = [(1, [])]
    for n, line in enumerate(lines, 1):
        if _DOC_SEP.match(line):
            docs.append((n + 1, []))
        else:
            docs[-1][1].append(line)
    for first, doc in docs:
        for start, block in _blocks(doc, first):
            try:
                value = load_one(block).data
            except OverLimit as e:  # a bomb is refused, not skipped
                x = e.problem
                raise InvalidInput(f"{source}:{x.line + start - 1}:{x.col}: {x.path}: {x.message}") from None
            except YamlProblem:
                result.skipped.append(f"line {start}: {_one_line(block.splitlines()[0], 60)} (not YAML)")
                continue
            if not isinstance(value, dict):
                continue
            for k, v in value.items():
                result.data[str(k)] = v
                result.lines[str(k)] = start
    return result


def _one_line(v: Any, width: int = 110) -> str:
    s = " ".join(str(v).split())
    s = "".join(c if c.isprintable() else "?" for c in s)
    return s if len(s) <= width else s[: width - 3] + "..."


def _dig(node: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(node, dict):
            return None
        node = node.get(k)
    return node


def _pos_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else None


def _walk_actions(node: Any, path: tuple[str, ...], out: list[tuple[str, str]]) -> None:
    """(dotted path of the owning entry, value) for every failure_action / action in the source."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("failure_action", "action") and isinstance(v, str):
                out.append((".".join(path), v))
            else:
                _walk_actions(v, path + (str(k),), out)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _walk_actions(v, path + (f"[{i}]",), out)


class _Out:
    """A YAML text with a comment column, written line by line so comments sit where they belong."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def put(self, indent: int, text: str, comment: str = "") -> None:
        body = "  " * indent + text
        pad = f"{body:<32}" if len(body) < 32 else body + "  "  # YAML needs a space before a comment's #
        self.lines.append(f"{pad}# {comment}" if comment else body)

    def note(self, indent: int, text: str) -> None:
        self.lines.append("  " * indent + "# " + text)

    def blank(self) -> None:
        self.lines.append("")


def convert(raw: bytes, source: str) -> str:
    """Convert a Demerzel autonomous-loop policy to a commented healer policy (YAML text)."""
    text = raw.decode("utf-8", errors="replace").replace("\x00", "")
    lines = db.unfenced(text)  # fenced code is an example (a GitHub Actions snippet), never policy
    src = read_lenient("\n".join(lines), source)
    bounds = db.find(lines, src.data, src.lines)
    il = src.data.get("iteration_limits")
    if il is None and not bounds:
        raise InvalidInput(f"{source}:1:1: iteration_limits: expected a Demerzel loop policy with loop bounds (an "
                           "iteration_limits section, or bounds such as max cycles per day, max duration per cycle, a kill "
                           "switch, consecutive auto-cycles), got none")
    if il is None:
        il = {}
    if not isinstance(il, dict):
        line = src.lines.get("iteration_limits", 1)
        kind = "a list" if isinstance(il, list) else repr(il)
        raise InvalidInput(f"{source}:{line}:1: iteration_limits: expected a mapping (default_max, absolute_max, stall_limit), got {kind}")

    unmapped: list[str] = []
    defaults = Loop()

    def limit(key: str, cap: int | None, cap_why: str, default: int) -> tuple[int | None, str]:
        """A positive-integer limit of the source, held under `cap`; a bad value is listed, healer's default kept."""
        value, note = _pos_int(il.get(key)), f"iteration_limits.{key}"
        if key in il and value is None:
            unmapped.append(f"iteration_limits.{key} = {_one_line(il[key], 40)}: expected a positive integer; healer's {default} kept")
        if value is not None and cap is not None and value > cap:
            value, note = cap, f"iteration_limits.{key} was {value}; {cap_why} {cap}"
        return value, note

    absolute, absolute_note = limit("absolute_max", HARD_MAX_ITERATIONS, "healer's hard ceiling is", defaults.absolute_max)
    ceiling = absolute or defaults.absolute_max
    max_it, max_note = limit("default_max", ceiling, "above absolute_max, so", defaults.max_iterations)
    cap = bounds.get("iteration_cap")
    if max_it is None and cap is not None:  # consecutive auto-cycles before a human looks: the iteration cap
        max_it, max_note = min(cap.value, ceiling), f"line {cap.line}: {cap.label}" + (
            f" (was {cap.value}; held under absolute_max {ceiling})" if cap.value > ceiling else "")
    if max_it is None and defaults.max_iterations > ceiling:
        max_it, max_note = ceiling, "healer's default lowered to the source's absolute_max"
    stall, _ = limit("stall_limit", None, "", defaults.stall.same_state)

    timeout_key, timeout = None, None
    for k, v in il.items():
        if "timeout" in str(k):
            try:
                timeout_key, timeout = str(k), durations.parse(v)
                break
            except ValueError:
                unmapped.append(f"iteration_limits.{k} = {_one_line(v, 40)}: expected a duration like 20m")

    deadline = bounds.get("iteration_deadline")
    timeout_note = f"iteration_limits.{timeout_key}"
    if timeout is None and deadline is not None:
        timeout_key, timeout = None, deadline.value
        timeout_note = _one_line(f"line {deadline.line}: {deadline.label}", 90)

    actions: list[tuple[str, str]] = []
    _walk_actions(src.data, (), actions)
    convergence = [v for p, v in actions if p.startswith("review_criteria.")]
    halting = any(v in _HALTS for v in convergence)

    replays = None
    cfh = _dig(src.data, "self_merge_authority", "escalation", "consecutive_failure_halt")
    if isinstance(cfh, dict) and _pos_int(cfh.get("max_consecutive_failures")):
        replays = cfh["max_consecutive_failures"] - 1

    o = _Out()
    meta = ", ".join(f"{k} {_one_line(src.data[k], 40)}" for k in ("name", "version", "effective_date") if k in src.data)
    o.note(0, "healer policy imported from a Demerzel autonomous-loop policy by `healer policy import demerzel`")
    o.note(0, f"source: {_one_line(source, 100)}" + (f" ({meta})" if meta else ""))
    o.note(0, "Keys not written here take healer's defaults; `healer policy show FILE` prints the full policy.")
    o.blank()
    o.put(0, "version: 1", "healer policy format")
    o.blank()
    o.put(0, "loop:")
    if max_it is not None:
        o.put(1, f"max_iterations: {max_it}", max_note)
    if absolute is not None:
        o.put(1, f"absolute_max: {absolute}", absolute_note)
    if timeout is not None:
        o.put(1, f"iteration_timeout: {durations.format(timeout)}",
              timeout_note)
    else:
        o.note(1, "The source has no per-iteration timeout. healer always puts a deadline around the")
        o.note(1, "whole iteration (the agent and its whole process tree), so its default is added here:")
        o.put(1, f"iteration_timeout: {durations.format(defaults.iteration_timeout)}", "ADDED: not in the source")
    if stall is not None or halting:
        o.put(1, "stall:")
        if stall is not None:
            o.put(2, f"same_state: {stall}", "iteration_limits.stall_limit (iterations without progress -> halt, exit 3)")
        if halting:
            # docs/loop.md: a repeated output is a hint, not a reason to stop; no progress (same_state) is what stops
            why = next(f"{p}.failure_action: {v}" for p, v in actions if p.startswith("review_criteria.") and v in _HALTS)
            o.put(2, "duplicate_output: flag", f"repetition flagged; the source halts ({_one_line(why, 60)}), healer "
                                               "stops on no progress (same_state)")
    if "daily_cap" in bounds:
        b = bounds["daily_cap"]
        o.put(1, f"max_iterations_per_day: {b.value}", _one_line(f"line {b.line}: {b.label}", 90))
    if "kill_switch" in bounds:
        b = bounds["kill_switch"]
        o.put(1, f"kill_switch: {yaml.safe_dump(b.value, default_style=None).strip().splitlines()[0]}",
              _one_line(f"line {b.line}: {b.label}; relative to the working tree", 90))
    if "lease" in bounds:
        b = bounds["lease"]
        o.blank()
        o.put(0, "supervisor:")
        o.put(1, f"lease_ttl: {durations.format(b.value)}", _one_line(f"line {b.line}: {b.label} (a lock older than this is taken over)", 90))
    if replays is not None:
        o.blank()
        o.put(0, "retry:")
        o.put(1, f"rejected_proposal_replays: {replays}",
              f"self_merge_authority...consecutive_failure_halt: {replays + 1} failures in a row -> halt")

    if actions:
        o.blank()
        o.note(0, "failure actions in the source and what healer does for them:")
        for p, v in actions:
            does = FAILURE_ACTIONS.get(v, "no healer equivalent (not mapped)")
            o.note(1, _one_line(f"{p or '(top)'}: {v} -> {does}", 200))
            if p in CHECKS:
                o.note(2, _one_line(f"healer: {CHECKS[p]}", 200))

    rules = il.get("rules")
    if isinstance(rules, list) and rules:
        o.blank()
        o.note(0, "iteration_limits.rules (kept as notes; healer enforces the limits above):")
        for r in rules:
            o.note(1, "- " + _one_line(r, 140))

    extra_il = [k for k in il if k not in {"default_max", "absolute_max", "stall_limit", "rules"} and k != timeout_key]
    for k in extra_il:
        if "timeout" not in str(k):
            unmapped.append(f"iteration_limits.{k} = {_one_line(il[k], 40)}: no healer equivalent")
    for k in src.data:
        if k == "iteration_limits":
            continue
        if k == "review_criteria":
            unmapped.append("review_criteria: only its failure_action values map (listed above); the checks themselves are Demerzel's")
            continue
        if k == "self_merge_authority":
            unmapped.append("self_merge_authority: confidence thresholds and conscience signals have no healer equivalent; "
                            "merges happen only when the merge gates pass"
                            + ("; consecutive_failure_halt mapped above" if replays is not None else ""))
            continue
        why = _UNMAPPED_WHY.get(k, "no healer equivalent")
        at = src.lines.get(k)
        unmapped.append(f"{_one_line(k, 60)} (line {at}): {why}" if at else f"{_one_line(k, 60)}: {why}")
    used = {b.line for b in bounds.values()}
    heads = db.headings(lines)
    for i, (n, title) in enumerate(heads):
        end = heads[i + 1][0] if i + 1 < len(heads) else len(lines) + 1
        if not any(n <= u < end for u in used):
            unmapped.append(f"section '{_one_line(title, 60)}' (line {n}): prose, no healer key")
    bound_tables = set()
    rows = db.table_rows(lines)
    for n, _cells in rows:
        if n in used:
            bound_tables.add(n)
    for n, cells in rows:
        near = any(abs(n - u) <= 12 for u in bound_tables)  # the other rows of a table that held a bound
        if near and n not in used and len(cells) >= 2:
            unmapped.append(f"table row '{_one_line(cells[0], 40)}' = {_one_line(cells[1], 40)} (line {n}): no healer equivalent")
    if unmapped or src.skipped:
        o.blank()
        o.note(0, "Not mapped (listed so nothing is dropped silently):")
        for u in unmapped:
            o.note(1, _one_line(u, 200))
        for s in src.skipped:
            o.note(1, "skipped " + s)

    out = "\n".join(o.lines) + "\n"
    validate_text(out, f"{source} (converted)")  # the converter's own promise: what it prints validates
    return out
