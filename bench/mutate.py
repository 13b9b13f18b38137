"""Source-level mutants of healer's decision code, drawn at random from a seed: the sites and the draw.

A mutant is one small change to one place in the source text, of a kind test suites are judged by: a comparison
turned (`<` to `<=`, `==` to `!=`, `in` to `not in`, ...), `and` for `or`, a `not` dropped, a condition negated,
an integer moved by one, `True` for `False`, `+` for `-`, a returned value replaced by `None`, a call statement
or an augmented assignment replaced by `pass`. Pure: source text in, mutants out (bench/mutants.py runs them).

Equivalent mutants are excluded by rule, never by hand:
  1. sites that cannot change behaviour are never drawn: docstrings, string constants and f-strings, type
     annotations, `if TYPE_CHECKING:` blocks, the arguments of logging calls (`log.*`, `logger.*`, `print`),
     `__repr__`/`__str__`, and lines marked `# pragma: no mutate`;
  2. a mutant whose module compiles to the same code objects as the original (bytecode, constants and names,
     recursively) is equivalent by construction and dropped before the draw (e.g. `n = 1 + 0` and `n = 1 - 0`, both folded to 1);
  3. a mutant that does not compile is dropped;
  4. `return False` -> `return None` in a function annotated `-> bool` is never drawn: a predicate's callers take
     its truth, under which None is False (measured twice: dispatcher.py:251 `check_disk`, dispatch_reap.py:117
     `_host_alive`, both survivors of every test, neither a behaviour). The `False -> True` mutant of that very
     return is still drawn, and so is `return None` of every other value (True, a computed bool, a tri-state
     `bool | None`, whose None means "unknown" and is compared with `is False`).
Nothing else is excluded: a mutant no test executes counts as a survivor ("not covered").
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import random
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from types import CodeType

# the decision code of issue 41: the pure cores, the dispatcher's pass, the supervisor, the remedies and actions
TARGETS = ("healer/core/*.py", "healer/fleet/dispatch*.py", "healer/supervisor.py", "healer/remedy/*.py",
           "healer/remedy/handlers/*.py", "healer/actions/*.py")

_CMP = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">"),
        ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="), ast.In: ("in", "not in"), ast.NotIn: ("not in", "in"),
        ast.Is: ("is", "is not"), ast.IsNot: ("is not", "is")}
_BIN = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "/"), ast.FloorDiv: ("//", "*"),
        ast.Div: ("/", "*"), ast.Mod: ("%", "*")}
_LOGGERS = {"log", "logger", "logging", "print", "warn", "warning", "debug", "info"}


@dataclass(frozen=True)
class Mutant:
    path: str  # relative to the repository
    line: int
    op: str  # what kind of change
    stmt_line: int  # the first line of the statement it sits in (what coverage records as run)
    start: int  # character offsets into the source text
    end: int
    before: str
    after: str

    @property
    def id(self) -> str:
        h = hashlib.sha1(f"{self.path}:{self.start}:{self.end}:{self.after}".encode()).hexdigest()[:8]
        return f"{self.path}:{self.line}:{self.op}:{h}"

    def apply(self, source: str) -> str:
        assert source[self.start:self.end] == self.before, (self.id, source[self.start:self.end], self.before)
        return source[:self.start] + self.after + source[self.end:]

    def as_dict(self) -> dict:
        return {"id": self.id, **asdict(self)}


class _Offsets:
    """ast positions (line, UTF-8 byte column) to offsets into the text."""

    def __init__(self, source: str):
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for ln in self.lines:
            self.starts.append(self.starts[-1] + len(ln))

    def at(self, line: int, col: int) -> int:
        text = self.lines[line - 1] if line - 1 < len(self.lines) else ""
        return self.starts[line - 1] + len(text.encode()[:col].decode(errors="replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.at(node.lineno, node.col_offset), self.at(node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]


def _is_docstring(node: ast.AST) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str))


def _call_name(call: ast.Call) -> str:
    f = call.func
    while isinstance(f, ast.Attribute):
        if isinstance(f.value, ast.Name) and f.value.id in _LOGGERS:
            return f.value.id
        if f.attr in _LOGGERS:
            return f.attr
        f = f.value
    return f.id if isinstance(f, ast.Name) else ""


class _Sites(ast.NodeVisitor):
    def __init__(self, path: str, source: str):
        self.path, self.source, self.off = path, source, _Offsets(source)
        self.out: list[Mutant] = []
        self.skip_lines = {i + 1 for i, ln in enumerate(self.off.lines) if "pragma: no mutate" in ln}
        self.stmt = [1]
        self.returns: list[str] = []  # the enclosing functions' return annotations, innermost last (rule 4)

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.stmt):
            self.stmt.append(node.lineno)
            try:
                super().visit(node)
            finally:
                self.stmt.pop()
        else:
            super().visit(node)

    def add(self, node: ast.AST, op: str, start: int, end: int, after: str) -> None:
        if getattr(node, "lineno", 0) in self.skip_lines:
            return
        before = self.source[start:end]
        if before != after:
            line = node.lineno  # type: ignore[attr-defined]
            self.out.append(Mutant(self.path, line, op, min(self.stmt[-1], line), start, end, before, after))

    # never inside these
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if node.name in ("__repr__", "__str__"):
            return
        body = node.body[1:] if node.body and _is_docstring(node.body[0]) else node.body
        self.returns.append(ast.unparse(node.returns) if node.returns is not None else "")
        try:
            for stmt in body:
                self.visit(stmt)
        finally:
            self.returns.pop()
        for d in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit(d)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        body = node.body[1:] if node.body and _is_docstring(node.body[0]) else node.body
        for stmt in body:
            self.visit(stmt)

    def visit_Module(self, node: ast.Module) -> None:
        body = node.body[1:] if node.body and _is_docstring(node.body[0]) else node.body
        for stmt in body:
            self.visit(stmt)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        return

    def visit_Import(self, node: ast.AST) -> None:
        return

    visit_ImportFrom = visit_Import

    def visit_Call(self, node: ast.Call) -> None:
        if _call_name(node) in _LOGGERS:
            return
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        self.visit(node.test)

    # the changes
    def visit_If(self, node: ast.If) -> None:
        if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        self._negate(node.test)
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self._negate(node.test)
        self.generic_visit(node)

    def _negate(self, test: ast.expr) -> None:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return  # dropping the `not` is the same mutant
        s, e = self.off.span(test)
        self.add(test, "negate_condition", s, e, f"not ({self.source[s:e]})")

    def visit_Compare(self, node: ast.Compare) -> None:
        left = node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            pair = _CMP.get(type(op))
            if pair is not None:
                s, e = self.off.span(left)[1], self.off.span(right)[0]
                gap = self.source[s:e]
                old, new = pair
                i = _find_op(gap, old)
                if i is not None:
                    self.add(node, f"compare {old} -> {new}", s + i, s + i + len(_op_text(gap, i, old)), new)
            left = right
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        s, e = self.off.span(node)
        text = self.source[s:e]
        out, pos = [], 0
        for a, b in itertools.pairwise(node.values):
            gs, ge = self.off.span(a)[1], self.off.span(b)[0]
            gap = self.source[gs:ge]
            i = _find_op(gap, old)
            if i is None:
                return self.generic_visit(node)
            out.append(text[pos:gs - s] + gap[:i] + new + gap[i + len(old):])
            pos = ge - s
        out.append(text[pos:])
        self.add(node, f"{old} -> {new}", s, e, "".join(out))
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.Not):
            s, e = self.off.span(node)
            os_, oe = self.off.span(node.operand)
            self.add(node, "drop not", s, e, f"({self.source[os_:oe]})")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        pair = _BIN.get(type(node.op))
        strings = any(isinstance(x, (ast.JoinedStr, ast.Constant)) and isinstance(getattr(x, "value", None), str)
                      or isinstance(x, ast.JoinedStr) for x in (node.left, node.right))
        if pair is not None and not strings:
            s, e = self.off.span(node.left)[1], self.off.span(node.right)[0]
            gap = self.source[s:e]
            i = gap.find(pair[0])
            if i >= 0:
                self.add(node, f"arith {pair[0]} -> {pair[1]}", s + i, s + i + len(pair[0]), pair[1])
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        v = node.value
        s, e = self.off.span(node)
        if isinstance(v, bool):
            self.add(node, f"{v} -> {not v}", s, e, str(not v))
        elif isinstance(v, int):
            self.add(node, "number", s, e, "0" if v == 1 else str(v + 1))

    def visit_Return(self, node: ast.Return) -> None:
        predicate_false = (isinstance(node.value, ast.Constant) and node.value.value is False
                           and bool(self.returns) and self.returns[-1] == "bool")  # rule 4
        if node.value is not None and not (isinstance(node.value, ast.Constant) and node.value.value is None) \
                and not predicate_false:
            s, e = self.off.span(node)
            self.add(node, "return None", s, e, "return None")
        self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Call) and _call_name(node.value) not in _LOGGERS:
            s, e = self.off.span(node)
            self.add(node, "drop call", s, e, "pass")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        s, e = self.off.span(node)
        self.add(node, "drop update", s, e, "pass")
        self.generic_visit(node)


def _find_op(gap: str, op: str) -> int | None:
    """Where the operator word `op` stands in the text between two operands (outside brackets)."""
    word = op[0].isalpha()
    for m in re.finditer(re.escape(op).replace(r"\ ", r"\s+") if word else re.escape(op), gap):
        if word and ((m.start() > 0 and (gap[m.start() - 1].isalnum() or gap[m.start() - 1] == "_"))
                     or (m.end() < len(gap) and (gap[m.end()].isalnum() or gap[m.end()] == "_"))):
            continue
        if not word and op in ("<", ">") and gap[m.end():m.end() + 1] == "=":
            continue
        if op == "is" and gap[m.end():].lstrip().startswith("not"):
            continue
        if op == "in" and gap[:m.start()].rstrip().endswith("not"):
            continue
        return m.start()
    return None


def _op_text(gap: str, i: int, op: str) -> str:
    """The operator as written at `i` (`not  in` keeps its own spacing)."""
    if " " not in op:
        return op
    first, second = op.split(" ")
    j = i + len(first)
    while gap[j].isspace():
        j += 1
    return gap[i:j + len(second)]


def _same_code(a: CodeType, b: CodeType) -> bool:
    if a.co_code != b.co_code or a.co_names != b.co_names or len(a.co_consts) != len(b.co_consts):
        return False
    for x, y in zip(a.co_consts, b.co_consts, strict=True):
        if isinstance(x, CodeType) and isinstance(y, CodeType):
            if not _same_code(x, y):
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


def sites(path: str, source: str) -> list[Mutant]:
    """Every mutant of one module that is not equivalent by the rules above, in source order."""
    tree = ast.parse(source)
    finder = _Sites(path, source)
    finder.visit(tree)
    # rule 2 compares the top-level statement that holds the mutant (a function, a class), compiled alone: the
    # same verdict as the whole module's, at a fraction of the cost
    off = finder.off
    tops = [(*off.span(node), node) for node in tree.body]
    compiled: dict[int, CodeType] = {}
    out, seen = [], set()
    for m in sorted(finder.out, key=lambda m: (m.start, m.end, m.after)):
        if (m.start, m.end, m.after) in seen:
            continue
        seen.add((m.start, m.end, m.after))
        top = next(((s, e) for s, e, _n in tops if s <= m.start and m.end <= e), (0, len(source)))
        try:
            if top[0] not in compiled:
                compiled[top[0]] = compile(source[top[0]:top[1]], path, "exec", dont_inherit=True)
            mutated = source[top[0]:m.start] + m.after + source[m.end:top[1]]
            code = compile(mutated, path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            continue  # rule 3
        if _same_code(code, compiled[top[0]]):
            continue  # rule 2
        out.append(m)
    return out


def target_files(root: Path, targets: tuple[str, ...] = TARGETS) -> list[Path]:
    files = sorted({p for pattern in targets for p in root.glob(pattern) if p.name != "__init__.py" or p.stat().st_size})
    return [p for p in files if p.suffix == ".py"]


def every_site(root: Path, targets: tuple[str, ...] = TARGETS) -> list[Mutant]:
    out: list[Mutant] = []
    for p in target_files(root, targets):
        out += sites(str(p.relative_to(root)), p.read_text())
    return out


def draw(all_sites: list[Mutant], n: int, seed: int) -> list[Mutant]:
    """`n` mutants drawn from every site by `seed`, uniformly, without replacement; the same seed and the same
    source give the same mutants."""
    rng = random.Random(seed)
    return sorted(rng.sample(all_sites, min(n, len(all_sites))), key=lambda m: (m.path, m.start))
