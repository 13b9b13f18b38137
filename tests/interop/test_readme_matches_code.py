"""The README's exit-code table and lifecycle diagram are the code's, not a memory of it."""

from __future__ import annotations

import re

from healer import errors, lifecycle
from tests.conftest import REPO, healer


def _section(title: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(f"## {title}\n")
    nxt = text.find("\n## ", start + 1)
    return text[start:nxt if nxt > 0 else None]


def test_exit_code_table_is_the_codes_healer_uses():
    rows = re.findall(r"^\| (\d+) \| (.+?) \|$", _section("Exit codes"), re.M)
    table = {int(code) for code, _ in rows}
    code_names = {v for k, v in vars(errors).items() if k.isupper() and isinstance(v, int)}
    assert table == code_names, f"README lists {sorted(table)}, healer/errors.py defines {sorted(code_names)}"


def test_lifecycle_diagram_shows_every_transition_and_nothing_else():
    text = (REPO / "README.md").read_text()
    block = re.search(r"```mermaid\n(stateDiagram-v2.*?)```", text, re.S).group(1)
    drawn = {(f, t, ev) for f, t, ev in re.findall(r"^\s+(\w+) --> (\w+): (\w+)$", block, re.M)}
    assert drawn == set(lifecycle.table()), (f"missing from the README: {sorted(set(lifecycle.table()) - drawn)}; "
                                            f"not in the code: {sorted(drawn - set(lifecycle.table()))}")


def test_board_states_prints_the_table_the_readme_promises():
    r = healer("board", "states")
    assert r.returncode == 0
    lines = r.stdout.strip().splitlines()
    assert lines[0].split() == ["from", "to", "event"]
    assert {tuple(x.split()) for x in lines[1:]} == set(lifecycle.table())
    assert healer("board", "states", "--mermaid").stdout.strip() == lifecycle.mermaid()
