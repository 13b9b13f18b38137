"""bench/mutate.py: the sites a module offers, the rule that drops equivalent mutants, and the seeded draw."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import mutate  # noqa: E402

SOURCE = '''"""A module docstring with < and and."""
import logging

log = logging.getLogger(__name__)


def decide(age: int, limit: int = 3, *, live: bool = True) -> str | None:
    """Docstring: age > limit."""
    log.info("age %s > %s", age, age > limit)
    if age > limit and live:
        return "stop"
    if not live:
        n = 1 + 0
        seen.append(n)
    count = 0
    count += 1
    return f"{age > limit}" if age in (1, 2) else None


def __repr__(self):
    return "x" if self.a < 1 else "y"
'''


def test_every_kind_of_change_is_offered_and_none_where_it_cannot_matter():
    got = mutate.sites("m.py", SOURCE)
    ops = {m.op for m in got}
    assert {"compare > -> >=", "and -> or", "negate_condition", "drop not", "return None", "drop call",
            "drop update", "number", "compare in -> not in", "True -> False"} <= ops
    for m in got:
        text = SOURCE.splitlines()[m.line - 1]
        assert '"""' not in text and "log.info" not in text, m  # docstrings, logging
        assert "__repr__" not in SOURCE[:m.start].rsplit("def ", 1)[-1].split("(")[0], m
        assert m.before != m.after
        mutated = m.apply(SOURCE)
        compile(mutated, "m.py", "exec")  # rule 3: every mutant compiles
    # the annotation `str | None` and the f-string's inner comparison are never mutated
    assert not [m for m in got if m.line == 7 and m.op.startswith("compare")]
    assert not [m for m in got if m.line == 18 and m.before == ">"]


def test_a_mutant_that_compiles_to_the_same_code_is_dropped_as_equivalent():
    got = mutate.sites("m.py", SOURCE)
    # `1 + 0` -> `1 - 0` folds to the same constant: not offered; `1 -> 0` in it changes the constant: offered
    assert not [m for m in got if m.line == 13 and m.op.startswith("arith")]
    assert [m for m in got if m.line == 13 and m.op == "number"]


def test_a_predicates_false_is_not_returned_as_none_but_every_other_value_is():
    """Rule 4: in a function annotated `-> bool`, `return False` -> `return None` is equivalent under the truth test
    its callers apply; its `False -> True` is drawn, and `return None` of True, of a computed bool and of a tri-state
    `bool | None` (None: unknown) are drawn."""
    src = ("def p(x) -> bool:\n    if x:\n        return False\n    return True\n"
           "def q(x) -> bool | None:\n    return False\n"
           "def r(x):\n    return False\n"
           "def s(x) -> bool:\n    return x > 1\n")
    got = {(m.line, m.op) for m in mutate.sites("m.py", src)}
    assert (3, "return None") not in got and (3, "False -> True") in got
    assert {(4, "return None"), (6, "return None"), (8, "return None"), (10, "return None")} <= got


def test_the_statement_line_is_where_coverage_sees_the_mutant():
    src = "def f(a, b):\n    return (a <\n            b)\n"
    (m,) = [m for m in mutate.sites("m.py", src) if m.op.startswith("compare")]
    assert (m.line, m.stmt_line) == (2, 2)
    src = "def f(a, b):\n    x = g(a,\n          b < 3)\n    return x\n"
    (m,) = [m for m in mutate.sites("m.py", src) if m.op.startswith("compare")]
    assert (m.line, m.stmt_line) == (3, 2)


@pytest.mark.long  # 14 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_the_draw_is_the_seeds_and_covers_the_decision_code():
    sites = mutate.every_site(ROOT)
    assert len(sites) > 1000
    paths = {m.path.split("/")[1] for m in sites}
    assert {"core", "fleet", "remedy", "actions", "supervisor.py"} <= paths
    a, b, c = mutate.draw(sites, 24, 7), mutate.draw(sites, 24, 7), mutate.draw(sites, 24, 8)
    assert [m.id for m in a] == [m.id for m in b] and len(a) == 24
    assert [m.id for m in a] != [m.id for m in c]
    for m in a:
        assert (ROOT / m.path).read_text()[m.start:m.end] == m.before
