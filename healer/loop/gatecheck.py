"""Gates judged from what ran, in an environment the agent cannot steer (issue 39): the pure half.

An exit code means what the tree makes it mean: a root `conftest.py` that marks every test passed, `addopts =
--collect-only` in `pytest.ini` or `pyproject.toml`, a `pytest.py` shadowing pytest, code under test calling
`os._exit(0)` on import. So a gate is prepared and judged by these rules, one implementation for the loop's
gates and the fleet's merge and main gates (the shell is healer/gating.py):

1. **The environment is healer's.** Path lists (`PATH`, `PYTHONPATH`) lose every entry that is relative or
   inside the tree; the variables that change what a tool loads from elsewhere (`PYTEST_ADDOPTS`,
   `PYTEST_PLUGINS`, `PYTHONSTARTUP`, `BASH_ENV`, `MAKEFILES`, ...) are dropped; `PYTHONNOUSERSITE=1` (no
   `usercustomize`, no user site `.pth`). For every gate, pytest or not (`neutral_env`).
2. **The gate's configuration is the base's.** The files a gate reads its instructions from (`gate_files`): the
   files its argv names in the tree (a script, `make`'s Makefile), for pytest every `conftest.py` outside the
   protected paths and the pytest section of each config file pytest would read (`pytest.toml`, `pytest.ini`,
   `pyproject.toml [tool.pytest*]`, `tox.ini [pytest]`, `setup.cfg [tool:pytest]`) must be as the run's base
   has them, before the gate and after it; a difference fails the gate, named (`config_differences`).
3. **pytest runs from healer's argv** (`pytest_argv`): `-P` (the tree's root is not `sys.path[0]` while
   pytest starts: no `pytest.py`, `_pytest/` or `sitecustomize.py` of the tree is imported in its place; the
   root comes back through `pythonpath`, after pytest has loaded), `-c` the base's config file (or none at all),
   `--rootdir` and `--confcutdir` the tree (nothing above it), no cache provider, and `--junitxml` to a file
   healer reads.
4. **The verdict is the report's** (`judge`): well formed, at least one test passed, none failed, no error
   (a collection error included), and every test of the protected test files the gate selects (`expected_tests`,
   read from their source, never from the tree's run) is in it and passed (skipped only where its own file marks
   it so). A missing report (the process exited before writing it) fails. The exit code must be 0 as well.

What this does not reach: code under test runs in pytest's own process, so code written to rewrite pytest's
results in memory (patching its report objects on import) still forges the report. That needs code aimed at
pytest's internals, and it is in the diff for whoever reviews it; docs/security.md says so.
"""

from __future__ import annotations

import ast
import configparser
import fnmatch
import posixpath
import shlex
import tomllib
import xml.etree.ElementTree as ET  # noqa: N817 - the stdlib's own short name
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

PASS, FAIL = "pass", "fail"
# pytest's order of config files (pytest 9: _pytest/config/findpaths.py); the first that holds its section wins
PYTEST_CONFIGS = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
DROP_ENV = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONINSPECT",
            "PYTHONEXECUTABLE", "PYTHONSAFEPATH", "BASH_ENV", "ENV", "MAKEFILES", "MAKEFLAGS", "GNUMAKEFLAGS", "MFLAGS",
            "PERL5OPT", "RUBYOPT", "NODE_OPTIONS")
PATH_LISTS = ("PATH", "PYTHONPATH")
MAKEFILES = ("GNUmakefile", "makefile", "Makefile")
# pytest options that narrow what runs in ways a reading of the test files cannot follow
NARROWING = ("-k", "-m", "--deselect", "--lf", "--last-failed", "--ff", "--sw", "--stepwise", "--pyargs", "--ignore",
             "--ignore-glob", "--co", "--collect-only", "--collectonly")
REPORT_KINDS = ("auto", "exit_code")


# -- 1. the environment ----------------------------------------------------------------------------

def _inside(path: str, tree: str) -> bool:
    p = posixpath.normpath(path)
    t = posixpath.normpath(tree)
    return p == t or p.startswith(t.rstrip("/") + "/")


def neutral_env(env: Mapping[str, str], tree: str) -> dict[str, str]:
    """The gate's environment: `env` without what would let the tree steer the tools (rule 1)."""
    out = {k: v for k, v in env.items() if k not in DROP_ENV}
    for k in PATH_LISTS:
        if k in out:
            keep = [e for e in out[k].split(":") if e.startswith("/") and not _inside(e, tree)]
            if keep:
                out[k] = ":".join(keep)
            else:
                del out[k]
    out["PYTHONNOUSERSITE"] = "1"
    return out


# -- 2. what a gate reads its instructions from ------------------------------------------------------

def _is_python(word: str) -> bool:
    name = posixpath.basename(word)
    return name.startswith("python") and all(c.isdigit() or c == "." for c in name[6:])


def _after_env(argv: Sequence[str]) -> int:
    """Where the program starts in `env [-i] [-u NAME] [NAME=VALUE]... program ...`."""
    i = 0
    if argv and posixpath.basename(argv[0]) == "env":
        i = 1
        while i < len(argv) and (argv[i].startswith("-") or "=" in argv[i]):
            i += 2 if argv[i] in ("-u", "--unset", "-C", "--chdir") else 1
    return i


@dataclass(frozen=True)
class PytestCall:
    head: tuple[str, ...]  # what comes before pytest's own arguments: [env ...] python [-opts] -m pytest | pytest
    args: tuple[str, ...]  # pytest's arguments as the policy wrote them
    module: bool  # `python -m pytest`: the cwd was sys.path[0], so the tree's root goes on pythonpath


def pytest_call(argv: Sequence[str]) -> PytestCall | None:
    """The gate's argv as a pytest run, or None when it is not one (`pytest`, `py.test`, `python -m pytest`,
    behind `env`)."""
    i = _after_env(argv)
    if i >= len(argv):
        return None
    prog = posixpath.basename(argv[i])
    if prog in ("pytest", "py.test"):
        return PytestCall(tuple(argv[:i + 1]), tuple(argv[i + 1:]), False)
    if not _is_python(argv[i]):
        return None
    j = i + 1
    while j < len(argv) and argv[j].startswith("-") and argv[j] != "-m":
        if argv[j] == "-c":
            return None  # python -c CODE: not a module run
        j += 2 if argv[j] in ("-X", "-W", "-Q") else 1
    if j + 1 < len(argv) and argv[j] == "-m" and argv[j + 1] in ("pytest", "py.test"):
        return PytestCall(tuple(argv[:j + 2]), tuple(argv[j + 2:]), True)
    return None


SHELLS = ("sh", "bash", "dash", "zsh", "ksh")
INTERPRETERS = (*SHELLS, "node", "perl", "ruby", "php", "Rscript", "tclsh", "lua")


def named_files(argv: Sequence[str]) -> list[str]:
    """The programs a gate's argv names, relative to its cwd: the program itself, the script an interpreter
    (`sh`, `bash`, `python`, `node`, ...) runs, make's Makefiles (`-f FILE`, or the defaults). Never its other
    arguments: a file a gate checks (`check.py attempt.txt`) is the agent's work, not the gate's instructions.
    Absolute paths count only inside the tree; the shell decides that (it knows the tree)."""
    i = _after_env(argv)
    words = list(argv[i:])
    if not words:
        return []
    out = [words[0]]
    prog = posixpath.basename(words[0])
    if prog in ("make", "gmake"):
        out += list(MAKEFILES)
        for k, w in enumerate(words):
            if w in ("-f", "--file", "--makefile") and k + 1 < len(words):
                out.append(words[k + 1])
            elif w.startswith(("--file=", "--makefile=")):
                out.append(w.split("=", 1)[1])
    elif prog in INTERPRETERS or _is_python(prog):
        inline = ("-c",) if prog in SHELLS else ("-c", "-m") if _is_python(prog) else ("-e", "-E", "--eval", "-p", "-r")
        k = 1
        while k < len(words) and words[k].startswith("-"):
            if words[k] in inline:  # inline code or a module: no script file
                k = len(words)
                break
            k += 2 if words[k] in ("-X", "-W", "-o", "-O", "-r", "--require") else 1
        if k < len(words):
            out.append(words[k])
    seen: list[str] = []
    for w in out:
        n = posixpath.normpath(w)
        if n not in seen and n not in (".", "..") and not n.startswith("../"):
            seen.append(n)
    return seen


def pytest_section(name: str, text: str | None) -> str | None:
    """The pytest configuration a config file holds, as comparable text (None: it holds none, or cannot be read:
    then pytest would not use it, or would fail on it)."""
    if text is None:
        return None
    base = posixpath.basename(name)
    try:
        if base.endswith(".toml"):
            doc = tomllib.loads(text)
            if base in ("pytest.toml", ".pytest.toml"):
                return repr(doc.get("pytest", doc))
            tool = doc.get("tool", {}).get("pytest")
            return None if tool is None else repr(tool)
        cp = configparser.RawConfigParser(strict=False, interpolation=None)
        cp.read_string(text, name)
    except (tomllib.TOMLDecodeError, configparser.Error, AttributeError, UnicodeError) as e:
        # pytest takes a dedicated file whatever it holds (and fails on it); a shared one it cannot read is none
        return f"<unreadable: {e}>" if base in ("pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml") else None
    section = "tool:pytest" if base == "setup.cfg" else "pytest"
    if cp.has_section(section):
        return repr(sorted(cp.items(section)))
    if base in ("pytest.ini", ".pytest.ini"):
        return "<pytest.ini>"  # pytest uses it even without a section
    return None


def config_file(files: Mapping[str, str | None]) -> str | None:
    """The file pytest takes its configuration from at the tree's root (pytest's own order), or None."""
    for name in PYTEST_CONFIGS:
        if pytest_section(name, files.get(name)) is not None:
            return name
    return None


def is_conftest(path: str) -> bool:
    return posixpath.basename(path) == "conftest.py"


def config_differences(base: Mapping[str, bytes | None], tree: Mapping[str, bytes | None | str]) -> list[str]:
    """Each gate file whose content in the tree is not the base's, with why. `tree` maps a path to its bytes, None
    (absent), or a str saying what stands there instead of a plain file (a link, a folder). For pytest's config
    files only their pytest section counts (a new dependency in `pyproject.toml` is no gate change)."""
    out: list[str] = []
    for path in sorted(set(base) | set(tree)):
        b, t = base.get(path), tree.get(path)
        if isinstance(t, str):
            out.append(f"{path}: {t} where the base has {'a file' if b is not None else 'nothing'}")
            continue
        if posixpath.basename(path) in PYTEST_CONFIGS and "/" not in path:
            bs = pytest_section(path, _text(b))
            ts = pytest_section(path, _text(t))
            if bs != ts:
                out.append(f"{path}: its pytest section differs from the base's" if bs is not None and ts is not None
                           else f"{path}: {'a pytest section the base does not have' if ts is not None else 'the base pytest section removed'}")
            continue
        if b == t:
            continue
        if b is None:
            out.append(f"{path}: not in the base")
        elif t is None:
            out.append(f"{path}: removed (the base has it)")
        else:
            out.append(f"{path}: differs from the base")
    return out


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "replace")


# -- 3. pytest's argv --------------------------------------------------------------------------------

def _ini_values(name: str, text: str | None) -> dict[str, object]:
    """The base config's pytest values (strings, or lists for TOML), for the keys healer must rewrite."""
    if text is None:
        return {}
    base = posixpath.basename(name)
    try:
        if base.endswith(".toml"):
            doc = tomllib.loads(text)
            if base in ("pytest.toml", ".pytest.toml"):
                got = doc.get("pytest", {})
            else:
                tool = doc.get("tool", {}).get("pytest", {})
                got = tool.get("ini_options", tool)
            return dict(got) if isinstance(got, dict) else {}
        cp = configparser.RawConfigParser(strict=False, interpolation=None)
        cp.read_string(text, name)
        section = "tool:pytest" if base == "setup.cfg" else "pytest"
        return dict(cp.items(section)) if cp.has_section(section) else {}
    except (tomllib.TOMLDecodeError, configparser.Error, AttributeError):
        return {}


def _words(v: object) -> list[str]:
    if isinstance(v, list):
        return [str(x) for x in v]
    try:
        return shlex.split(str(v))
    except ValueError:
        return str(v).split()


def pythonpath(name: str | None, text: str | None, tree: str, module: bool) -> list[str]:
    """The base config's `pythonpath`, absolute (its entries are relative to the config file, and pytest is given
    the config as a path it resolves the same way: the tree's root), then the root itself for `python -m`."""
    vals = _ini_values(name or "", text) if name else {}
    out = [w if w.startswith("/") else posixpath.normpath(posixpath.join(tree, w)) for w in _words(vals.get("pythonpath", []))]
    if module and tree not in out:
        out.append(tree)
    return out


def pytest_argv(call: PytestCall, *, tree: str, config: str, report: str, path_entries: Sequence[str]) -> list[str]:
    """Rule 3. `config`: the base's config file (in the tree, checked equal to the base's) or an empty one of
    healer's; `report`: where pytest writes its JUnit XML."""
    head = list(call.head)
    if call.module:  # `-P` right after the interpreter: the tree's root is not sys.path[0] while pytest loads
        i = _after_env(head)
        head = [*head[:i + 1], "-P", *head[i + 1:]]
    args = list(call.args)
    # the policy's own -c / --rootdir / --confcutdir / --junitxml are replaced: healer decides where they point
    cleaned: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-c", "--config-file", "--rootdir", "--confcutdir", "--junitxml", "--junit-xml", "--inifile"):
            skip = True
            continue
        if a.startswith(("--config-file=", "--rootdir=", "--confcutdir=", "--junitxml=", "--junit-xml=", "--inifile=")):
            continue
        cleaned.append(a)
    extra = ["-c", config, f"--rootdir={tree}", f"--confcutdir={tree}", "-p", "no:cacheprovider",
             f"--junitxml={report}", "-o", "junit_logging=no"]
    if path_entries:
        extra += ["-o", "pythonpath=" + " ".join(shlex.quote(p) for p in path_entries)]
    return [*head, *cleaned, *extra]


def policy_config(args: Sequence[str]) -> str | None:
    """The config file the policy's own pytest args name (`-c FILE`), relative to the tree, or None."""
    for k, a in enumerate(args):
        if a in ("-c", "--config-file", "--inifile") and k + 1 < len(args):
            return posixpath.normpath(args[k + 1])
        if a.startswith(("--config-file=", "--inifile=")):
            return posixpath.normpath(a.split("=", 1)[1])
    return None


# -- 4. the verdict ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Expected:
    nodeid: str  # tests/test_x.py::TestA::test_b (parametrized ids extend it with [..])
    may_skip: bool = False  # its own file marks it skipped or expected to fail somewhere


def narrowed(args: Sequence[str], addopts: Sequence[str] = ()) -> bool:
    """The run selects tests in a way a reading of the files cannot follow (-k, -m, node ids, --lf, ...)."""
    for a in (*addopts, *args):
        if a in NARROWING or a.startswith(tuple(n + "=" for n in NARROWING if n.startswith("--"))) or "::" in a:
            return True
        if a.startswith(("-k", "-m")) and len(a) > 2 and not a.startswith("--"):
            return True
    return False


def selected_roots(args: Sequence[str], base_config: str | None, base_text: str | None) -> list[str]:
    """The paths the run collects from (relative to the tree): its positional arguments, else the base config's
    testpaths, else the whole tree ("")."""
    takes_value = {"-p", "-o", "--override-ini", "-W", "--pythonwarnings", "--maxfail", "--tb", "-r", "--durations",
                   "--basetemp", "--import-mode", "-n", "--numprocesses", "--dist", "--timeout", "--capture",
                   "--log-level", "--junit-prefix", "--color", "--code-highlight", "--rootdir", "--confcutdir", "-c",
                   "--config-file", "--junitxml", "--cov", "--cov-report"}
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in takes_value:
            skip = True
            continue
        if a.startswith("-"):
            continue
        out.append(posixpath.normpath(a))
    if out:
        return ["" if p == "." else p for p in out]
    vals = _ini_values(base_config or "", base_text) if base_config else {}
    tp = _words(vals.get("testpaths", []))
    return [posixpath.normpath(p) for p in tp] or [""]


def python_files(base_config: str | None, base_text: str | None) -> list[str]:
    vals = _ini_values(base_config or "", base_text) if base_config else {}
    return _words(vals.get("python_files", [])) or ["test_*.py", "*_test.py"]


def addopts(base_config: str | None, base_text: str | None) -> list[str]:
    vals = _ini_values(base_config or "", base_text) if base_config else {}
    return _words(vals.get("addopts", []))


def test_files(paths: Iterable[str], roots: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """Of `paths` (the protected files), the test files the run collects."""
    out = []
    for p in paths:
        if not any(fnmatch.fnmatch(posixpath.basename(p), pat) for pat in patterns):
            continue
        if any(r == "" or p == r or p.startswith(r.rstrip("/") + "/") for r in roots):
            out.append(p)
    return sorted(out)


_SKIPPY = ("skip", "xfail", "importorskip")


def _marks_skip(node: ast.AST) -> bool:
    return any(w in ast.unparse(node) for w in _SKIPPY)


def expected_tests(path: str, source: str) -> list[Expected]:
    """The tests pytest collects from one file, by its default rules (functions `test*`, methods `test*` of classes
    `Test*` without `__init__` and of unittest classes), read from the source: the protected file is the base's,
    so what it holds is what must run, whatever the code under test does at import. A file that does not parse
    yields nothing here (the report then holds its collection error, which fails the gate)."""
    try:
        mod = ast.parse(source, path)
    except (SyntaxError, ValueError):
        return []
    # module-level statements that skip (pytestmark, importorskip, a skip at import) mark the whole file; names
    # bound to a skip mark (`slow = pytest.mark.skipif(...)`) mark what they decorate
    whole = any(isinstance(n, ast.Expr | ast.If | ast.Try) and _marks_skip(n) for n in mod.body) or any(
        isinstance(n, ast.Assign) and _marks_skip(n) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                              for t in n.targets) for n in mod.body)
    marks = {t.id for n in mod.body if isinstance(n, ast.Assign) and _marks_skip(n.value)
             for t in n.targets if isinstance(t, ast.Name)}

    def skippy(node: ast.AST) -> bool:  # the module's rule, plus this file's own skip marks
        text = ast.unparse(node)
        return any(w in text for w in _SKIPPY) or any(m in text for m in marks)

    out: list[Expected] = []
    for n in mod.body:
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test"):
            out.append(Expected(f"{path}::{n.name}", whole or any(skippy(d) for d in n.decorator_list)))
        elif isinstance(n, ast.ClassDef):
            unit = any("TestCase" in ast.unparse(b) for b in n.bases)
            if not (unit or n.name.startswith("Test")):
                continue
            if not unit and any(isinstance(m, ast.FunctionDef) and m.name == "__init__" for m in n.body):
                continue  # pytest does not collect a Test class with __init__
            cls_skip = whole or any(skippy(d) for d in n.decorator_list) or any(
                isinstance(m, ast.Assign) and skippy(m) for m in n.body)
            for m in n.body:
                if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and m.name.startswith("test"):
                    out.append(Expected(f"{path}::{n.name}::{m.name}",
                                        cls_skip or any(skippy(d) for d in m.decorator_list)))
    return out


def skipping_conftests(expected: Sequence[Expected], conftests: Mapping[str, str]) -> list[Expected]:
    """`expected`, with every test under a folder whose base `conftest.py` (protected, or checked equal to the
    base's) skips or xfails something marked as one that may be skipped: such a conftest decides at run time
    (a missing service, a flag), which a reading of the test file cannot follow."""
    dirs = [posixpath.dirname(p) for p, src in conftests.items() if any(w in src for w in _SKIPPY)]
    out = []
    for e in expected:
        path = e.nodeid.partition("::")[0]
        under = any(d == "" or path.startswith(d + "/") for d in dirs)
        out.append(Expected(e.nodeid, True) if under and not e.may_skip else e)
    return out


def _junit_key(nodeid: str) -> tuple[str, str]:
    """(classname, name) pytest's JUnit XML gives a node id (_pytest/junitxml.py mangle_test_address)."""
    path, _, rest = nodeid.partition("::")
    names = [path, *rest.split("::")] if rest else [path]
    dotted = path.replace("/", ".")
    dotted = dotted[:-3] if dotted.endswith(".py") else dotted
    names[0] = dotted
    return ".".join(names[:-1]), names[-1]


@dataclass(frozen=True)
class Judged:
    outcome: str  # pass | fail
    why: str  # one line
    passed: int = 0
    failed: int = 0
    skipped: int = 0


def judge(report: bytes | None, expected: Sequence[Expected], exit_code: int | None, *,
          check_expected: bool = True) -> Judged:
    """Rule 4: the gate's verdict from its report (and its exit code, which must agree)."""
    if not report or not report.strip():
        return Judged(FAIL, "no test report: pytest ended without writing one (exited early, or killed)")
    try:
        root = ET.fromstring(report)  # noqa: S314 - healer's own report file, parsed without entities below
    except ET.ParseError as e:
        return Judged(FAIL, f"test report not well formed: {e}")
    if root.tag not in ("testsuites", "testsuite"):
        return Judged(FAIL, f"test report not JUnit XML (root <{root.tag}>)")
    results: dict[tuple[str, str], str] = {}
    passed = failed = skipped = 0
    first_bad = ""
    for tc in root.iter("testcase"):
        key = (tc.get("classname", ""), tc.get("name", ""))
        kids = {c.tag for c in tc}
        if kids & {"failure", "error"}:
            state = "failed"
            failed += 1
            first_bad = first_bad or f"{key[0]}::{key[1]}".strip(":")
        elif "skipped" in kids:
            state = "skipped"
            skipped += 1
        else:
            state = "passed"
            passed += 1
        prev = results.get(key)
        results[key] = "failed" if "failed" in (prev, state) else state
    if failed:
        return Judged(FAIL, f"{failed} test(s) failed or errored in the report (first: {first_bad})", passed, failed, skipped)
    if passed == 0:
        return Judged(FAIL, f"no test passed in the report ({skipped} skipped): nothing was run", passed, failed, skipped)
    if check_expected:
        for want in expected:
            cls, name = _junit_key(want.nodeid)
            got = [s for (c, n), s in results.items() if c == cls and (n == name or n.startswith(name + "["))]
            if not got:
                return Judged(FAIL, f"{want.nodeid} (a protected test) is not in the report: it did not run",
                              passed, failed, skipped)
            if "passed" not in got and not want.may_skip:
                return Judged(FAIL, f"{want.nodeid} (a protected test) was skipped", passed, failed, skipped)
    if exit_code != 0:
        return Judged(FAIL, f"pytest exited {exit_code} though its report shows no failure", passed, failed, skipped)
    return Judged(PASS, f"report: {passed} passed, {skipped} skipped, every protected test that was due ran",
                  passed, failed, skipped)
