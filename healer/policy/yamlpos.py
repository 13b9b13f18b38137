"""YAML reading that remembers where every key came from.

Errors must name FILE:LINE:COL, so documents are composed into nodes (which carry
marks) and built by hand: path -> (line, column) for every mapping key and value.
Duplicate keys are errors here (PyYAML silently keeps the last one).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import yaml

MAX_BYTES = 1_000_000
MAX_DEPTH = 64
# values reached again through an alias; only an alias bomb ("billion laughs") needs more
MAX_ALIASED = 100_000

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


_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_/-]*$")


def key_text(key: object) -> str:
    """A key as it appears in an error line: bare when plain, else quoted with escapes (never a space or newline)."""
    k = str(key)
    if _PLAIN_KEY.match(k):
        return k
    return json.dumps(k, ensure_ascii=True).replace(" ", "\\u0020")


def dotted(path: Path) -> str:
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            k = key_text(p)
            out += f"[{k}]" if k.startswith('"') else ("." if out else "") + k
    return out or "(top)"


_PLAIN_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:omap"}


def _at(node: yaml.Node, path: Path, message: str) -> YamlProblem:
    m = node.start_mark
    return YamlProblem(Problem(m.line + 1, m.column + 1, dotted(path), message))


class _Ctx:
    """Per-load state: a fresh loader (PyYAML caches constructed nodes on it) and the node budget."""

    def __init__(self) -> None:
        self.loader = _Loader("")
        self.seen: set[int] = set()
        self.aliased = 0


def _build(node: yaml.Node, path: Path, marks: dict, depth: int, ctx: _Ctx) -> object:
    if id(node) in ctx.seen:
        ctx.aliased += 1
        if ctx.aliased > MAX_ALIASED:
            raise _at(node, path, f"expected at most {MAX_ALIASED} values repeated through aliases, got more (an alias bomb?)")
    else:
        ctx.seen.add(id(node))
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
        if depth > MAX_DEPTH:
            raise _at(node, path, f"expected at most {MAX_DEPTH} levels of nesting, got deeper")
        if node.tag not in _PLAIN_TAGS:
            raise _at(node, path, f"expected plain YAML values, got the tag {node.tag!r}")
    marks.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.MappingNode):
        out: dict = {}
        for knode, vnode in node.value:
            if knode.tag == "tag:yaml.org,2002:merge":
                raise _at(knode, path, "expected plain keys, got a YAML merge key (<<)")
            if not isinstance(knode, yaml.ScalarNode):
                raise _at(knode, path, "expected a scalar key, got a collection")
            key = _build(knode, path + ("<key>",), {}, depth, ctx)
            if not isinstance(key, str):
                shown = "null" if key is None else repr(key)
                raise _at(knode, path + (shown,), f"expected a text key (quote it), got {shown}")
            if key in out:
                raise _at(knode, path + (key,), f"expected each key once, got {key_text(key)} again")
            kpath = path + (str(key),)
            marks[kpath] = (knode.start_mark.line + 1, knode.start_mark.column + 1)
            out[key] = _build(vnode, kpath, marks, depth + 1, ctx)
            marks[kpath] = (knode.start_mark.line + 1, knode.start_mark.column + 1)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(v, path + (i,), marks, depth + 1, ctx) for i, v in enumerate(node.value)]
    try:
        return ctx.loader.construct_object(node, deep=True)
    except yaml.constructor.ConstructorError as e:
        if "constructor for the tag" in (e.problem or ""):
            raise _at(node, path, f"expected plain YAML values, got the tag {node.tag!r}") from None
        raise _at(node, path, f"expected plain YAML values, got one that cannot be built ({(e.problem or '').strip()})") from None
    except (ValueError, ArithmeticError, TypeError) as e:
        # PyYAML's scalar constructors raise plain errors (a 5000-digit int, month 13)
        raise _at(node, path, f"expected a readable value, got one that cannot be read ({_brief(e)})") from None


class _Loader(yaml.SafeLoader):
    pass


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
        if "single document" in (e.context or ""):
            what = "expected one YAML document, got several"
        else:  # undefined alias, duplicate anchor
            what = f"expected valid YAML, got a composition error: {(e.problem or 'unknown').strip()}"
        raise YamlProblem(Problem((m.line + 1) if m else 1, (m.column + 1) if m else 1, "(file)", what)) from None
    except yaml.MarkedYAMLError as e:
        m = e.problem_mark or e.context_mark
        what = (e.problem or "invalid YAML").strip()
        raise YamlProblem(Problem((m.line + 1) if m else 1, (m.column + 1) if m else 1, "(file)", f"expected valid YAML, got a syntax error: {what}")) from None
    except yaml.YAMLError as e:
        raise YamlProblem(Problem(1, 1, "(file)", f"expected valid YAML, got an error: {_brief(e)}")) from None
    except RecursionError:
        raise YamlProblem(Problem(1, 1, "(file)", "expected reasonable nesting, got a document too deeply nested")) from None
    if node is None:
        return Located(None, {(): (1, 1)})
    marks: dict = {}
    try:
        data = _build(node, (), marks, 0, _Ctx())
    except RecursionError:
        raise YamlProblem(Problem(1, 1, "(file)", "expected reasonable nesting, got a document too deeply nested")) from None
    except yaml.constructor.ConstructorError as e:
        m = e.problem_mark
        raise YamlProblem(Problem((m.line + 1) if m else 1, (m.column + 1) if m else 1, "(file)", f"expected plain YAML values, got one that cannot be built ({(e.problem or '').strip()})")) from None
    return Located(data, marks)


def _brief(e: Exception) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text if len(text) <= 80 else text[:77] + "..."


def mark_for(marks: dict, path: Path) -> tuple[int, int]:
    """The mark of the longest known prefix of path."""
    p = tuple(path)
    while p and p not in marks:
        p = p[:-1]
    return marks.get(p, (1, 1))
