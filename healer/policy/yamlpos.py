"""YAML reading that remembers where every key came from.

Errors must name FILE:LINE:COL, so documents are composed into nodes (which carry
marks) and built by hand: path -> (line, column) for every mapping key and value.
Duplicate keys are errors here (PyYAML silently keeps the last one).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

MAX_BYTES = 1_000_000
MAX_DEPTH = 64

Path = tuple  # of str | int


@dataclass
class Located:
    data: object
    marks: dict[Path, tuple[int, int]] = field(default_factory=dict)


@dataclass
class Problem:
    line: int
    col: int
    path: str
    message: str


class YamlProblem(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def dotted(path: Path) -> str:
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out or "(top)"


def _build(node: yaml.Node, path: Path, marks: dict, depth: int) -> object:
    if depth > MAX_DEPTH:
        m = node.start_mark
        raise YamlProblem(Problem(m.line + 1, m.column + 1, dotted(path), f"expected at most {MAX_DEPTH} levels of nesting, got deeper"))
    marks.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.MappingNode):
        out: dict = {}
        for knode, vnode in node.value:
            if knode.tag == "tag:yaml.org,2002:merge":
                raise YamlProblem(Problem(knode.start_mark.line + 1, knode.start_mark.column + 1, dotted(path), "expected plain keys, got a YAML merge key (<<)"))
            key = _build(knode, path + ("<key>",), {}, depth + 1)
            if isinstance(key, (list, dict)):
                raise YamlProblem(Problem(knode.start_mark.line + 1, knode.start_mark.column + 1, dotted(path), "expected a scalar key, got a collection"))
            if key in out:
                raise YamlProblem(Problem(knode.start_mark.line + 1, knode.start_mark.column + 1, dotted(path + (str(key),)), f"expected each key once, got '{key}' again"))
            kpath = path + (str(key),)
            marks[kpath] = (knode.start_mark.line + 1, knode.start_mark.column + 1)
            out[key] = _build(vnode, kpath, marks, depth + 1)
            marks[kpath] = (knode.start_mark.line + 1, knode.start_mark.column + 1)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(v, path + (i,), marks, depth + 1) for i, v in enumerate(node.value)]
    return yaml.SafeLoader.construct_object(_LOADER, node, deep=True)  # type: ignore[arg-type]


class _Loader(yaml.SafeLoader):
    pass


_LOADER = _Loader("")


def read_text(raw: bytes) -> str:
    if len(raw) > MAX_BYTES:
        raise YamlProblem(Problem(1, 1, "(file)", f"expected at most {MAX_BYTES} bytes, got {len(raw)}"))
    if b"\x00" in raw:
        raise YamlProblem(Problem(1, 1, "(file)", "expected UTF-8 text, got binary data (NUL bytes)"))
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise YamlProblem(Problem(line, 1, "(file)", f"expected UTF-8 text, got an undecodable byte at offset {e.start}")) from None


def load_one(text: str) -> Located:
    """Parse a single YAML document with positions; raises YamlProblem."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.composer.ComposerError as e:
        m = e.problem_mark or e.context_mark
        raise YamlProblem(Problem((m.line + 1) if m else 1, (m.column + 1) if m else 1, "(file)", "expected one YAML document, got several")) from None
    except yaml.MarkedYAMLError as e:
        m = e.problem_mark or e.context_mark
        what = (e.problem or "invalid YAML").strip()
        raise YamlProblem(Problem((m.line + 1) if m else 1, (m.column + 1) if m else 1, "(file)", f"expected valid YAML, got a syntax error: {what}")) from None
    except yaml.YAMLError as e:
        raise YamlProblem(Problem(1, 1, "(file)", f"expected valid YAML, got: {e}")) from None
    except RecursionError:
        raise YamlProblem(Problem(1, 1, "(file)", "expected reasonable nesting, got a document too deeply nested")) from None
    if node is None:
        return Located(None, {(): (1, 1)})
    marks: dict = {}
    try:
        data = _build(node, (), marks, 0)
    except RecursionError:
        raise YamlProblem(Problem(1, 1, "(file)", "expected reasonable nesting, got a document too deeply nested")) from None
    except yaml.constructor.ConstructorError as e:
        m = e.problem_mark
        raise YamlProblem(Problem((m.line + 1) if m else 1, (m.column + 1) if m else 1, "(file)", f"expected plain YAML values, got: {e.problem}")) from None
    return Located(data, marks)


def mark_for(marks: dict, path: Path) -> tuple[int, int]:
    """The mark of the longest known prefix of path."""
    p = tuple(path)
    while p and p not in marks:
        p = p[:-1]
    return marks.get(p, (1, 1))
