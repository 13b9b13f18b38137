"""The event catalogue: which payload keys each event kind can carry, read off the source where events are written.

There is no hand-kept list to drift: every place healer or the game days write an event is a call of one of a
few shapes, and this module reads them (Python's own parser, not a regex):

- `store.append(KIND, subject, {payload})` and the game-day engine's `note(KIND, subject, {payload})`;
- the store's own `_event(db, KIND, subject, {payload})`;
- the pure core's `Effect("event", KIND, subject, {payload})`;
- `set_setting(key, value, event=KIND)`, whose payload is `{"value": …}`;
- `update_adopted(id, …, event=KIND, payload={…})`.

A kind is a string literal (or either branch of `A if c else B`); an f-string kind (`f"intent.{state}"`) stands
for its family (`intent.*`). A payload is *closed* when it is a dict literal with literal keys (`**` of another
dict literal or of `x if c else {}` included); anything else (a variable, `**kwargs`) leaves the kind *open*:
its keys are unknown and nothing is claimed about it. A scenario's checker asking for a payload key that no
writer of its kind gives, every writer being closed, can never match: `healer gameday validate` warns (issue 34).
"""

from __future__ import annotations

import ast
import fnmatch
import hashlib
import json
import os
import re
from pathlib import Path

from healer.policy.cache import cache_dir

KIND = re.compile(r"^[a-z]+\.[a-z_]+(\.[a-z_]+)?$")
ROOT = Path(__file__).resolve().parents[1]
# writer name -> (index of the kind argument, index of the payload argument)
WRITERS = {"append": (0, 2), "note": (0, 2), "_event": (1, 3)}

_catalogue: list[tuple[str, frozenset[str] | None, str]] | None = None


def _kinds(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and KIND.match(node.value):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _kinds(node.body) + _kinds(node.orelse)
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        head = str(node.values[0].value)
        if re.fullmatch(r"[a-z]+\.", head):
            return [head + "*"]
    return []


def _keys(node: ast.AST | None) -> frozenset[str] | None:
    """The literal keys of a payload expression, or None when they cannot be known from here."""
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return frozenset()
    if isinstance(node, ast.Dict):
        out: set[str] = set()
        for k, v in zip(node.keys, node.values, strict=True):
            if k is None:  # **spread
                inner = _keys(v)
                if inner is None:
                    return None
                out |= inner
            elif isinstance(k, ast.Constant) and isinstance(k.value, str):
                out.add(k.value)
            else:
                return None
        return frozenset(out)
    if isinstance(node, ast.IfExp):
        a, b = _keys(node.body), _keys(node.orelse)
        return None if a is None or b is None else a | b
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        if any(kw.arg is None for kw in node.keywords):
            return None
        return frozenset(kw.arg for kw in node.keywords if kw.arg)
    return None


def _name(f: ast.AST) -> str:
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _write_call(node: ast.Call) -> tuple[ast.AST, ast.AST | None, bool] | None:
    """(kind node, payload node, payload is the setting's {"value"}) when `node` writes an event, else None."""
    name = _name(node.func)
    kw = {k.arg: k.value for k in node.keywords if k.arg}
    if name == "set_setting" or (name == "Effect" and node.args and isinstance(node.args[0], ast.Constant)
                                 and node.args[0].value == "set"):
        return (kw["event"], None, True) if "event" in kw else None
    if name == "update_adopted":  # the store's adopted loops: `event=` with its `payload=` (healer/store/sql_adopted.py)
        return (kw["event"], kw.get("payload"), False) if "event" in kw else None
    if name == "Effect":
        if not (node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "event"):
            return None
        ki, pi = 1, 3
    elif name in WRITERS:
        ki, pi = WRITERS[name]
    else:
        return None
    if len(node.args) <= ki:
        return None
    return node.args[ki], (node.args[pi] if len(node.args) > pi else kw.get("payload")), False


def _returns(trees: list[ast.AST]) -> dict[str, set[str]]:
    """The kind literals each function (by name) returns: `status, out, kind = apply_fault(...)` then `append(kind, …)`."""
    out: dict[str, set[str]] = {}
    for tree in trees:
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                got = out.setdefault(fn.name, set())
                for r in ast.walk(fn):
                    if isinstance(r, ast.Return) and r.value is not None:
                        got.update(k for c in ast.walk(r.value) for k in _kinds(c))
    return out


def _resolve(node: ast.AST, fn: ast.AST | None, returns: dict[str, set[str]]) -> list[str] | None:
    """The kinds a kind expression can be; None when it cannot be told from here (a helper's parameter)."""
    got = _kinds(node)
    if got:
        return got
    if not isinstance(node, ast.Name) or fn is None:
        return None
    args = fn.args
    params = [*args.posonlyargs, *args.args]
    defaults = dict(zip([a.arg for a in params][len(params) - len(args.defaults):], args.defaults, strict=True))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None})
    if node.id in defaults:
        return _kinds(defaults[node.id]) or None
    for a in ast.walk(fn):  # `kind = "x.y"`, or `…, kind = helper(...)` in the same function
        if isinstance(a, ast.Assign) and len(a.targets) == 1:
            t = a.targets[0]
            names = [t] if isinstance(t, ast.Name) else list(t.elts) if isinstance(t, ast.Tuple) else []
            if any(isinstance(n, ast.Name) and n.id == node.id for n in names):
                if isinstance(a.value, ast.Call) and returns.get(_name(a.value.func)):
                    return sorted(returns[_name(a.value.func)])
                if isinstance(a.value, ast.Subscript) and isinstance(a.value.value, ast.Dict):  # {A: "x.y", …}[k]
                    return [k for v in a.value.value.values for k in _kinds(v)] or None
                return _kinds(a.value) or None
    return None


def _writes(tree: ast.AST, returns: dict[str, set[str]]):
    """(kind, keys or None) of every event write in a module whose kind can be told."""
    owner: dict[int, ast.AST | None] = {}
    for fn in ast.walk(tree):  # outer functions first: an inner one overwrites, so a call is its innermost's
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for c in ast.walk(fn):
                if isinstance(c, ast.Call):
                    owner[id(c)] = fn
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        w = _write_call(node)
        if w is None:
            continue
        kind_node, payload, setting = w
        kinds = _resolve(kind_node, owner.get(id(node)), returns)
        if not kinds:
            continue
        keys = frozenset({"value"}) if setting else _keys(payload)
        for k in kinds:
            yield k, keys


def catalogue() -> list[tuple[str, frozenset[str] | None, str]]:
    """(kind or family glob, payload keys or None for open, where) of every event write in healer/ and chaos/.
    Parsing them all costs about a second: the result is kept in healer's cache folder, keyed by every source
    file's size and modification time (a changed file reads them all again)."""
    global _catalogue
    if _catalogue is None:
        files = sorted(f for pkg in ("healer", "chaos") for f in (ROOT / pkg).rglob("*.py"))
        key = _key(files)
        _catalogue = _cached(key)
        if _catalogue is None:
            _catalogue = _build(files)
            _keep(key, _catalogue)
    return _catalogue


def _build(files: list[Path]) -> list[tuple[str, frozenset[str] | None, str]]:
    trees: list[tuple[str, ast.AST]] = []
    for f in files:
        try:
            trees.append((str(f.relative_to(ROOT)), ast.parse(f.read_text(errors="replace"))))
        except (SyntaxError, OSError, ValueError):
            continue
    returns = _returns([t for _, t in trees])
    return [(k, keys, rel) for rel, tree in trees for k, keys in _writes(tree, returns)]


def _key(files: list[Path]) -> str:
    h = hashlib.sha256(Path(__file__).read_bytes())
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:32]


def _store() -> Path:
    return cache_dir() / "event-catalogue.json"


def _cached(key: str) -> list[tuple[str, frozenset[str] | None, str]] | None:
    try:
        data = json.loads(_store().read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    return [(k, None if keys is None else frozenset(keys), where) for k, keys, where in data["writes"]]


def _keep(key: str, writes) -> None:
    store = _store()
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        tmp = store.with_name(f".{store.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps({"key": key, "writes": [(k, None if keys is None else sorted(keys), w)
                                                               for k, keys, w in writes]}))
            os.replace(tmp, store)
        finally:
            tmp.unlink(missing_ok=True)
    except OSError:
        pass  # a read-only home only costs the next validation its parse


def _related(pattern: str, kind: str) -> bool:
    return fnmatch.fnmatchcase(kind, pattern) or fnmatch.fnmatchcase(pattern, kind)


def keys_for(kind: str) -> frozenset[str] | None:
    """Every payload key a writer of `kind` (a kind or a glob) gives; None when unknown (no writer found here, or
    one whose payload is not a literal)."""
    writers = [keys for k, keys, _ in catalogue() if _related(kind, k)]
    if not writers or any(keys is None for keys in writers):
        return None
    return frozenset().union(*writers)


def impossible(kinds: list[str], payload: dict) -> list[tuple[str, frozenset[str]]]:
    """(key, keys the writers give) of each payload key that no event of these kinds can carry."""
    known: set[str] = set()
    for k in kinds:
        keys = keys_for(k)
        if keys is None:
            return []
        known |= keys
    return [(key, frozenset(known)) for key in payload if key not in known]
