"""Runbooks as policy: Markdown whose YAML front matter is a Rule. Pure: texts in, rules out.

    ---
    id: requeue-frozen
    when: frozen_in_progress
    for: 0s
    do: [requeue_ticket]
    limits: {max_per_hour: 20, max_per_ticket: 3}
    escalate_after: 3
    ---
    # Ticket frozen in progress
    ## Symptom ... ## Cause ... ## What healer does ... ## What a human does ...

Errors are located lines, `FILE:LINE:COL: key: expected …, got …`, with LINE counted
in the whole file (the front matter starts on line 2). The shell reads the files
(`include_runbooks`) and calls `rules_from_runbooks`, then `with_rules` to obtain the
policy in force: the policy's own `rules:` come first and so win over runbooks for
the same `when`; runbooks win over the built-in defaults.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from healer.core.rules import DEFAULT_RULES
from healer.policy.load import _short, problems_for
from healer.policy.schema import Rule
from healer.policy.yamlpos import Problem, YamlProblem, load_one

SECTIONS = ("Symptom", "Cause", "What healer does", "What a human does")
_FENCE = re.compile(r"^(---|\.\.\.)\s*$")


def split(text: str) -> tuple[str, str, int] | None:
    """(front matter, body, line number where the body starts) or None when there is no front matter."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return None
    for i in range(1, len(lines)):
        if _FENCE.match(lines[i]):
            return "\n".join(lines[1:i]) + "\n", "\n".join(lines[i + 1:]), i + 2
    return None


def _loc(source: str, p: Problem, offset: int = 1) -> str:
    return f"{source}:{p.line + offset}:{p.col}: {p.path}: {p.message}"


def parse(source: str, text: str) -> tuple[Rule | None, list[str]]:
    """One runbook -> (rule or None, located errors)."""
    parts = split(text)
    if parts is None:
        return None, [f"{source}:1:1: (front matter): expected a YAML front matter block opened and closed by '---' lines, "
                      f"got {'no closing ---' if text.lstrip().startswith('---') else 'none'}"]
    fm = parts[0]
    try:
        located = load_one(fm)
    except YamlProblem as yp:
        return None, [_loc(source, yp.problem)]
    data = located.data
    if not isinstance(data, dict):
        return None, [f"{source}:2:1: (front matter): expected a mapping with id, when, do, got {_short(data)}"]
    probs = problems_for(data, located.marks, Rule)
    if probs:
        return None, [_loc(source, p) for p in sorted(probs, key=lambda p: (p.line, p.col))]
    # the schema refuses steps that cannot apply to `when` (Rule._applicable), as it does in a policy's `rules:`
    return Rule.model_validate(data), []


def _line_of(text: str, key: str) -> int:
    """The line of a top-level front matter key (for errors found after validation)."""
    for i, line in enumerate(text.splitlines()[1:], start=2):
        if _FENCE.match(line):
            break
        if line.startswith(key + ":"):
            return i
    return 2


def rules_from_runbooks(texts: Iterable[tuple[str, str]]) -> tuple[list[Rule], list[str]]:
    """(source, text) pairs, in the order to apply them -> (rules, located errors). Duplicate ids are errors."""
    rules: list[Rule] = []
    errors: list[str] = []
    ids: dict[str, str] = {}
    whens: dict[str, str] = {}
    for source, text in texts:
        rule, errs = parse(source, text)
        errors.extend(errs)
        if rule is None:
            continue
        if rule.id in ids:
            errors.append(f"{source}:{_line_of(text, 'id')}:1: id: expected a unique rule id, got {rule.id!r} again (first in {ids[rule.id]})")
            continue
        key = rule.when + "".join(f"[{x}]" for x in sorted(rule.labels))
        if key in whens:
            # only one rule per finding kind (and label set) is in force; a second one would be ignored without a word
            errors.append(f"{source}:{_line_of(text, 'when')}:1: when: expected one runbook per finding kind"
                          f"{' and labels' if rule.labels else ''}, got a second one for {key} (first in {whens[key]})")
            continue
        ids[rule.id] = source
        whens[key] = source
        rules.append(rule)
    return rules, errors


def check(texts: Iterable[tuple[str, str]]) -> list[str]:
    """Everything `healer runbook check` reports: front matter problems and missing prose sections."""
    texts = list(texts)
    _rules, errors = rules_from_runbooks(texts)
    for source, text in texts:
        parts = split(text)
        if parts is None:
            continue
        body, start = parts[1], parts[2]
        heads = {m.group(1).strip().lower() for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", body, re.M)}
        missing = [s for s in SECTIONS if s.lower() not in heads]
        if missing:
            errors.append(f"{source}:{start}:1: (prose): expected the sections {', '.join(SECTIONS)}, "
                          f"got none named {', '.join(missing)}")
    return errors


def with_rules(policy, rules: Iterable[Rule]):
    """The policy in force: its own rules first (they win per `when`), then the runbooks' rules."""
    return policy.model_copy(update={"rules": [*policy.rules, *rules]})


def template(name: str, when: str = "frozen_in_progress") -> str:
    default = next((r for r in DEFAULT_RULES if r.when == when), None)
    do = ", ".join(default.do) if default else "notify"
    return f"""---
id: {name}
when: {when}
for: 0s
do: [{do}]
limits: {{max_per_hour: 20, max_per_ticket: 3}}
escalate_after: 3
---
# {name}

## Symptom

What an operator sees (the finding, its evidence, the alert text).

## Cause

Why this happens in a fleet of agent loops.

## What healer does

The steps in `do`, in order; the limits that apply; when it escalates instead.

## What a human does

What to check, and how to fix the cause for good.
"""
