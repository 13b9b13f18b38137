"""The one guarded YAML (and JSON) reader of healer and chaos: policies, runbooks, scenarios, Chaos Toolkit
experiments, Demerzel policies, the store's config, the pytest plugin's scenario sniffing all read through here
(tests/spine/test_yaml_guard.py fails on any other `yaml.load`-like call in healer/ or chaos/).

Errors must name FILE:LINE:COL, so documents are composed into nodes (which carry marks) and built by hand:
path -> (line, column) for every mapping key and value. Duplicate keys are errors here (PyYAML silently keeps the
last one).

The guard: a document is first walked as a stream of events by libyaml (C; a 1 MB file in milliseconds) that counts
every value with aliases expanded and the nesting depth, and stops at the first value over a limit, so an alias
bomb ("billion laughs": 9 lines, 10^9 values) or a 1 MB document of values is refused in a few milliseconds before
a node is built. Measured 2026-12-07 on the loaded 2-core machine: PyYAML's pure-Python composer takes ~65 µs a
value (a 300 KB list: 10 s), libyaml's ~3 µs, with the same nodes and marks; so nodes are composed by libyaml and the
pure-Python composer runs only to word a syntax error as healer always has (its messages name the offending
character; libyaml's do not).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path as FsPath

import yaml

from healer.errors import InvalidInput

MAX_BYTES = 1_000_000
MAX_DEPTH = 64
# values in a document with aliases expanded: 23x the biggest file healer ships (policies/default.yaml: 430 events),
# ~0.1 s to build (0.45 s on the 2-core machine at load 17); an alias bomb ("billion laughs") or a flood needs more
MAX_VALUES = 10_000
# a faulty document up to this size has its fault worded by PyYAML's composer (~30 ms), a bigger one by libyaml
REWORD_MAX = 64 * 1024

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


class OverLimit(YamlProblem):
    """Over a guard's limit (bytes, values, nesting): refused even by a reader that skips what is not YAML."""


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
    """Per-load state: a fresh loader (PyYAML caches constructed nodes on it)."""

    def __init__(self) -> None:
        self.loader = _Loader("")


def _build(node: yaml.Node, path: Path, marks: dict, ctx: _Ctx) -> object:
    """The values of a node tree whose size and depth _prescan has bounded."""
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
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
            key = _build(knode, path + ("<key>",), {}, ctx)
            if not isinstance(key, str):
                shown = "null" if key is None else repr(key)
                raise _at(knode, path + (shown,), f"expected a text key (quote it), got {shown}")
            if key in out:
                raise _at(knode, path + (key,), f"expected each key once, got {key_text(key)} again")
            kpath = path + (str(key),)
            marks[kpath] = (knode.start_mark.line + 1, knode.start_mark.column + 1)
            out[key] = _build(vnode, kpath, marks, ctx)
            marks[kpath] = (knode.start_mark.line + 1, knode.start_mark.column + 1)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(v, path + (i,), marks, ctx) for i, v in enumerate(node.value)]
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
        raise OverLimit(Problem(1, 1, "(file)", f"expected at most {MAX_BYTES} bytes, got {len(raw)}"))
    if b"\x00" in raw:
        raise YamlProblem(Problem(1, 1, "(file)", "expected UTF-8 text, got binary data (NUL bytes)"))
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise YamlProblem(Problem(line, 1, "(file)", f"expected UTF-8 text, got an undecodable byte at offset {e.start}")) from None


class _Frame:
    """An open collection in _prescan: what it expands to so far, and where its current child sits."""

    __slots__ = ("is_map", "children", "anchor", "size", "pos")

    def __init__(self, is_map: bool, anchor: str | None) -> None:
        self.is_map, self.children, self.anchor, self.size = is_map, 0, anchor, 1
        self.pos: str | int | None = None


def _prescan(text: str) -> None:
    """Refuse a document with more than MAX_VALUES values (aliases expanded) or nested deeper than MAX_DEPTH, from
    libyaml's event stream, at the first value over the limit. A syntax error is left to the composer that words it."""
    sizes: dict[str, int] = {}  # anchor -> values it expands to
    stack: list[_Frame] = []
    total = 0
    for ev in yaml.parse(text, Loader=yaml.CSafeLoader):
        if isinstance(ev, yaml.CollectionEndEvent):
            done = stack.pop()
            if done.anchor:
                sizes[done.anchor] = done.size
            if stack:
                stack[-1].size += done.size
            continue
        if not isinstance(ev, (yaml.ScalarEvent, yaml.AliasEvent, yaml.CollectionStartEvent)):
            continue
        alias = isinstance(ev, yaml.AliasEvent)
        n = sizes.get(ev.anchor or "", 1) if alias else 1
        total += n
        if stack:  # where this value sits: its key's text, or its index
            top = stack[-1]
            if top.is_map and top.children % 2 == 0:
                top.pos = ev.value if isinstance(ev, yaml.ScalarEvent) else "<key>"
            elif not top.is_map:
                top.pos = top.children
            top.children += 1
            if not isinstance(ev, yaml.CollectionStartEvent):
                top.size += n
        if total > MAX_VALUES:
            why = "with aliases expanded, got more (an alias bomb?)" if alias else "got more"
            raise _event_at(ev, stack, f"expected at most {MAX_VALUES} values, {why}")
        if isinstance(ev, yaml.CollectionStartEvent):
            if len(stack) > MAX_DEPTH:
                raise _event_at(ev, stack, f"expected at most {MAX_DEPTH} levels of nesting, got deeper")
            stack.append(_Frame(isinstance(ev, yaml.MappingStartEvent), ev.anchor))


def _event_at(ev: yaml.Event, stack: list[_Frame], message: str) -> OverLimit:
    m = ev.start_mark
    return OverLimit(Problem(m.line + 1, m.column + 1, dotted(tuple(f.pos for f in stack)), message))


def load_one(text: str) -> Located:
    """Parse a single YAML document with positions; raises YamlProblem."""
    try:
        _prescan(text)
        node = yaml.compose(text, Loader=yaml.CSafeLoader)
    except yaml.YAMLError as e:
        m = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        at = ((m.line + 1) if m else 1, (m.column + 1) if m else 1)
        problem = (getattr(e, "problem", None) or "").strip()
        if "nesting depth" in problem:  # libyaml's scanner looks ahead past our limit in `[[[[…`
            raise OverLimit(Problem(*at, "(file)", f"expected at most {MAX_DEPTH} levels of nesting, got deeper")) from None
        if "single document" in (getattr(e, "context", None) or ""):
            raise YamlProblem(Problem(*at, "(file)", "expected one YAML document, got several")) from None
        if len(text) > REWORD_MAX:  # the pure-Python composer would take seconds: libyaml's words
            raise YamlProblem(Problem(*at, "(file)", f"expected valid YAML, got a syntax error: {problem or _brief(e)}")) from None
        node = _compose_for_the_message(text)
    if node is None:
        return Located(None, {(): (1, 1)})
    marks: dict = {}
    try:
        data = _build(node, (), marks, _Ctx())
    except yaml.constructor.ConstructorError as e:
        m = e.problem_mark
        raise YamlProblem(Problem((m.line + 1) if m else 1, (m.column + 1) if m else 1, "(file)", f"expected plain YAML values, got one that cannot be built ({(e.problem or '').strip()})")) from None
    return Located(data, marks)


def _compose_for_the_message(text: str) -> yaml.Node | None:
    """libyaml refused the text: PyYAML's own composer finds the same fault and words it (a YamlProblem)."""
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
    return node  # libyaml and PyYAML disagree on an edge of YAML: PyYAML's reading of a small text


def load_json(text: str) -> Located:
    """A JSON document under the same limits (size by read_text, depth, values, each key once); no marks but the
    top (JSON's numbers and escapes are not YAML 1.1's, so a .json file is read as JSON)."""
    def pairs(items: list) -> dict:
        out: dict = {}
        for k, v in items:
            if k in out:
                raise YamlProblem(Problem(1, 1, "(file)", f"expected each key once, got {key_text(k)} again"))
            out[k] = v
        return out

    try:
        data = json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as e:
        raise YamlProblem(Problem(e.lineno, e.colno, "(file)", f"expected valid JSON, got a syntax error: {e.msg}")) from None
    except RecursionError:
        raise OverLimit(Problem(1, 1, "(file)", f"expected at most {MAX_DEPTH} levels of nesting, got deeper")) from None
    todo: list[tuple[object, int]] = [(data, 0)]
    total = 0
    while todo:
        value, depth = todo.pop()
        total += 1
        if total > MAX_VALUES:
            raise OverLimit(Problem(1, 1, "(file)", f"expected at most {MAX_VALUES} values, got more"))
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise OverLimit(Problem(1, 1, "(file)", f"expected at most {MAX_DEPTH} levels of nesting, got deeper"))
            todo += [(v, depth + 1) for v in (value.values() if isinstance(value, dict) else value)]
    return Located(data, {(): (1, 1)})


def read_capped(path: str | FsPath) -> bytes:
    """A file's bytes, never more than MAX_BYTES read (a 10 GB file is refused without being read); OSError as open."""
    fp = FsPath(path)
    with fp.open("rb") as f:
        raw = f.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise OverLimit(Problem(1, 1, "(file)", f"expected at most {MAX_BYTES} bytes, got {fp.stat().st_size}"))
    return raw


def load_path(path: str | FsPath) -> Located:
    """A YAML file (or a .json file, as JSON) through the guard; YamlProblem or OSError."""
    text = read_text(read_capped(path))
    return load_json(text) if str(path).lower().endswith(".json") else load_one(text)


def line(source: str, p: Problem) -> str:
    """The one-line report: `FILE:LINE:COL: key.path: expected …, got …`."""
    return f"{source}:{p.line}:{p.col}: {p.path}: {p.message}"


@contextlib.contextmanager
def reading(path: str | FsPath, what: str = "file") -> Iterator[None]:
    """A file that cannot be read (missing, a folder, unreadable) as InvalidInput (exit 65): one line naming it."""
    try:
        yield
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise InvalidInput(f"{path}: is a directory, expected a {what}") from None
    except OSError as e:
        raise InvalidInput(f"{path}: cannot read: {e.strerror or e}") from None


def load_data(path: str | FsPath, what: str = "file") -> object:
    """A YAML/JSON file's data, or InvalidInput (exit 65) with one line saying where and why."""
    try:
        with reading(path, what):
            return load_path(path).data
    except YamlProblem as yp:
        raise InvalidInput(line(str(path), yp.problem)) from None


def _brief(e: Exception) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text if len(text) <= 80 else text[:77] + "..."


def mark_for(marks: dict, path: Path) -> tuple[int, int]:
    """The mark of the longest known prefix of path."""
    p = tuple(path)
    while p and p not in marks:
        p = p[:-1]
    return marks.get(p, (1, 1))
