"""Load and validate policy files; turn every problem into `FILE:LINE:COL: path: expected …, got …`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path as FsPath
from typing import Any

from pydantic import BaseModel, ValidationError

from healer.errors import InvalidInput
from healer.policy.schema import WRITTEN, Policy
from healer.policy.yamlpos import Problem, YamlProblem, dotted, key_text, load_one, mark_for, read_capped, read_text, reading

_EXPECT = {
    "int_parsing": "an integer",
    "int_type": "an integer",
    "int_from_float": "a whole number",
    "float_parsing": "a number",
    "float_type": "a number",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "missing": "this key to be set",
    "too_short": "at least one item",
    "finite_number": "a finite number",
    "string_too_short": "a non-empty string",
}


def _short(v: Any) -> str:
    if isinstance(v, dict):
        return "a mapping" if v else "an empty mapping"
    if isinstance(v, list):
        return "a list" if v else "an empty list"
    if v is None:
        return "nothing (null)"
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def _describe(err: Mapping[str, Any], model: type[BaseModel]) -> str:
    t = err["type"]
    inp = err.get("input")
    ctx = err.get("ctx") or {}
    if t == "extra_forbidden":
        return f"expected a known key, got unknown key {key_text(err['loc'][-1])}" + _known(model, err["loc"][:-1])
    if t == "literal_error":
        return f"expected {ctx.get('expected', 'one of the allowed values')}, got {_short(inp)}"
    if t in ("greater_than_equal", "greater_than"):
        bound = ctx.get("ge", ctx.get("gt"))
        word = "at least" if t == "greater_than_equal" else "more than"
        return f"expected {word} {bound}, got {_short(inp)}"
    if t in ("less_than_equal", "less_than"):
        bound = ctx.get("le", ctx.get("lt"))
        return f"expected at most {bound} (the maximum), got {_short(inp)}"
    if t == "value_error":
        msg = str(ctx.get("error", err.get("msg", "")))
        return msg if msg.startswith("expected") else f"expected a valid value, got a problem: {msg}"
    if t == "missing":
        return "expected this key to be set, got nothing"
    if t == "too_short":
        return f"expected at least {ctx.get('min_length', 1)} item(s), got {_short(inp)}"
    if t == "string_too_short":
        return f"expected at least {ctx.get('min_length', 1)} character(s), got {_short(inp)}"
    if t in _EXPECT:
        return f"expected {_EXPECT[t]}, got {_short(inp)}"
    return f"expected a valid value ({err.get('msg', t)}), got {_short(inp)}"


def _known(model: type[BaseModel], loc: tuple) -> str:
    m: Any = model
    for part in loc:
        if isinstance(part, int) or m is None:
            continue
        f = getattr(m, "model_fields", {}).get(part)
        if f is None:
            return ""
        ann = f.annotation
        m = _model_in(ann)
    if m is None or not hasattr(m, "model_fields"):
        return ""
    names = [f.alias or n for n, f in m.model_fields.items()]
    return " (known: " + ", ".join(names) + ")"


def _model_in(ann: Any) -> Any:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for a in getattr(ann, "__args__", ()) or ():
        found = _model_in(a)
        if found is not None:
            return found
    return None


def _loc_path(loc: tuple) -> tuple:
    # pydantic adds tags for unions/function validators; keep real keys and indexes
    return tuple(p for p in loc if isinstance(p, int) or not str(p).startswith(("function-", "list[", "dict[", "union[")))


def problems_for(data: Any, marks: dict, model: type[BaseModel]) -> list[Problem]:
    """What a person wrote (a file, an --override), validated: durations need their unit (schema.WRITTEN)."""
    try:
        model.model_validate(data, context=WRITTEN)
    except ValidationError as e:
        out = []
        for err in e.errors(include_url=False):
            loc = _loc_path(tuple(err["loc"]))
            message = _describe(err, model)
            # a model-level check names the key it is about with a trailing "@key" (or "@key.N": an item of it)
            tail = message.rsplit(" @", 1)[1] if " @" in message else ""
            if tail and all(p.isidentifier() or p.isdigit() for p in tail.split(".")):
                message = message.rsplit(" @", 1)[0]
                loc = loc + tuple(int(p) if p.isdigit() else p for p in tail.split("."))
            line, col = mark_for(marks, loc)
            out.append(Problem(line, col, dotted(loc), message))
        return out
    return []


def validate_text(text_or_bytes: str | bytes, source: str, model: type[BaseModel] = Policy) -> Any:
    """Parse + validate; raise InvalidInput with one located line per problem."""
    try:
        text = read_text(text_or_bytes) if isinstance(text_or_bytes, bytes) else text_or_bytes
        located = load_one(text)
    except YamlProblem as yp:
        p = yp.problem
        raise InvalidInput(_line(source, p), [_line(source, p)]) from None
    data = located.data
    if data is None:
        p = Problem(1, 1, "(top)", "expected a mapping of policy sections, got an empty document")
        raise InvalidInput(_line(source, p), [_line(source, p)])
    if not isinstance(data, dict):
        p = Problem(1, 1, "(top)", f"expected a mapping of policy sections, got {_short(data)}")
        raise InvalidInput(_line(source, p), [_line(source, p)])
    probs = problems_for(data, located.marks, model)
    if probs:
        lines = [_line(source, p) for p in sorted(probs, key=lambda p: (p.line, p.col))]
        raise InvalidInput(lines[0], lines)
    return model.model_validate(data)


def _line(source: str, p: Problem) -> str:
    return f"{source}:{p.line}:{p.col}: {p.path}: {p.message}"


def load_policy(path: str | FsPath | None = None) -> Policy:
    """Load a policy file; None means the embedded default."""
    if path is None:
        return Policy()
    try:
        with reading(path, "policy file"):
            raw = read_capped(path)  # a 10 GB file is refused without being read
    except YamlProblem as yp:
        raise InvalidInput(_line(str(path), yp.problem)) from None
    return validate_text(raw, str(path))


def default_policy_path() -> FsPath:
    """The shipped, commented default policy. In a checkout healer/policy/default.yaml is a symbolic link to
    policies/default.yaml (the one file people edit); a built wheel carries the file itself as package data, so
    `healer init` after `pip install` writes the same commented file, not a dump of the schema (issue 34)."""
    return (FsPath(__file__).parent / "default.yaml").resolve()
