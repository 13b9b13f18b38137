"""Gates judged from what ran (issue 39): the shell around healer/loop/gatecheck.py, one for the loop's gates
(healer/loop/iteration.py) and the fleet's merge and main gates (healer/fleet/gates.py).

`prepare` gathers what the rules need (the base's blobs through git, the tree's files without following a link),
compares the gate's files with the base's, and writes, in a folder of healer's own that the sandbox shows
read-only: a copy of each gate file as the base has it (bound read-only over the tree's under bwrap and in a
container, so code under test cannot rewrite a `conftest.py` or the gate's script while the gate runs), an empty
config for a base without one, and the empty report file, the one file there the sandbox may write.
`judge` compares the gate's files again (what code under test changed while it ran, unsandboxed) and reads the
report. Under `none` nothing is bound: the comparisons before and after are all there is.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path

from healer import git
from healer.loop import gatecheck as gc
from healer.loop.protect import protected

REPORT_CAP = 64 << 20  # bytes of JUnit XML read back: more is not a report healer's gates write
FILE_CAP = 4 << 20  # bytes of a gate file compared: a bigger conftest or Makefile is "differs"
EMPTY_INI = "pytest-empty.ini"


@dataclass
class Prepared:
    argv: list[str]
    env: dict[str, str]
    over: list[tuple[Path, Path]] = field(default_factory=list)  # (healer's copy of the base's, the tree's path)
    report: Path | None = None  # pytest: the JUnit XML healer reads; None: exit code only
    refused: str | None = None  # the gate is not run: why (a gate file differs from the base's)
    expected: list[gc.Expected] = field(default_factory=list)
    check_expected: bool = True
    files: list[str] = field(default_factory=list)  # the gate files, compared again after the run
    base: dict[str, bytes | None] = field(default_factory=dict)
    note: str = ""  # said in the gate's log: how the gate was prepared


def _rel_inside(word: str, tree: Path) -> str | None:
    """`word` (a path the argv names) relative to the tree, when it lies inside it."""
    p = Path(word)
    full = p if p.is_absolute() else tree / p
    try:
        rel = Path(os.path.normpath(full)).relative_to(tree)
    except ValueError:
        return None
    s = rel.as_posix()
    return None if s in ("", ".") else s


def read_tree(tree: Path, rel: str) -> bytes | None | str:
    """The tree's file at `rel`: its bytes, None when absent, or what stands there instead of a plain file
    (a link anywhere on the way, a folder, a FIFO): never followed, never blocked on."""
    cur = tree
    parts = rel.split("/")
    for i, part in enumerate(parts):
        cur = cur / part
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            return None
        except OSError as e:
            return f"unreadable ({e.strerror})"
        if stat.S_ISLNK(st.st_mode):
            return "a symbolic link"
        if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
            return None
    if stat.S_ISDIR(st.st_mode):
        return "a folder"
    if not stat.S_ISREG(st.st_mode):
        return "not a plain file"
    if st.st_size > FILE_CAP:
        return f"a file of {st.st_size} bytes"
    try:
        fd = os.open(cur, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        return f"unreadable ({e.strerror})"
    with os.fdopen(fd, "rb") as f:
        return f.read(FILE_CAP + 1)


_BLOBS: dict[tuple[str, str], bytes | None] = {}  # (base, path) -> content: a commit's content never changes
_PATHS: dict[str, list[str]] = {}  # base -> its files
CACHE_BASES = 8


def _base_blobs(tree: Path, base: str, paths: list[str]) -> dict[str, bytes | None]:
    """The base's content of each path (None: not a file there), in one `git cat-file --batch` for what this
    process has not read yet (a loop reads the same base every iteration: one git process, once)."""
    want = [p for p in paths if (base, p) not in _BLOBS]
    if want:
        data = git.raw(tree, "cat-file", "--batch",
                       input="".join(f"{base}:{p}\n" for p in want).encode("utf-8", "surrogateescape"))
        pos = 0
        for p in want:
            nl = data.index(b"\n", pos)
            head = data[pos:nl].split()
            pos = nl + 1
            got: bytes | None = None
            if len(head) == 3 and head[1] in (b"blob", b"tree", b"commit", b"tag"):
                size = int(head[2])
                got = data[pos:pos + size] if head[1] == b"blob" else None
                pos += size + 1
            if len(_BLOBS) > 4096:
                _BLOBS.clear()
            _BLOBS[(base, p)] = got
    return {p: _BLOBS[(base, p)] for p in paths}


def _base_paths(tree: Path, base: str) -> list[str]:
    if base not in _PATHS:
        d = git.raw(tree, "ls-tree", "-r", "-z", "--name-only", "--full-tree", base)
        if len(_PATHS) >= CACHE_BASES:
            _PATHS.clear()
        _PATHS[base] = [x for x in d.decode("utf-8", "surrogateescape").split("\0") if x]
    return _PATHS[base]


def _tree_conftests(tree: Path) -> list[str]:
    """Every conftest.py git can see in the tree, ignored ones too (pytest loads what .gitignore names), but in
    hidden folders (pytest never recurses into `.*`: healer's own `.healer/`, where its copies and the quarantine
    lie, is one)."""
    d = git.raw(tree, "ls-files", "-z", "-c", "-o", "--", ":(glob)**/conftest.py", ":(exclude,glob).*/**",
                ":(exclude,glob)**/.*/**")
    return sorted({x for x in d.decode("utf-8", "surrogateescape").split("\0")
                   if x and not any(part.startswith(".") for part in x.split("/")[:-1])})


def prepare(argv: list[str], tree: Path, base: str | None, protected_paths: list[str], own: Path,
            env: dict[str, str], *, report: str = "auto", extra_files: list[str] | None = None,
            name: str = "gate") -> Prepared:
    """One gate, ready to run in `tree` (rules 1-3 of healer/loop/gatecheck.py). `base`: the commit (or tree)
    whose gate files are the operator's; `own`: an empty folder of healer's that the gate's sandbox shows
    read-only (its report file is bound writable)."""
    tree = Path(os.path.abspath(tree))
    prep = Prepared(argv=list(argv), env=gc.neutral_env(env, str(tree)))
    call = gc.pytest_call(argv) if report == "auto" else None
    files = [r for w in gc.named_files(argv) if (r := _rel_inside(w, tree)) is not None]
    files += [f for f in (extra_files or []) if f not in files]
    if base is None:
        prep.files = files
        return prep
    all_base = _base_paths(tree, base) if call is not None else []
    if call is not None:
        conf = [p for p in sorted(set(_tree_conftests(tree)) | {p for p in all_base if gc.is_conftest(p)})
                if not protected(p, protected_paths)]
        files += [p for p in (*conf, *gc.PYTEST_CONFIGS) if p not in files]
        pol_cfg = gc.policy_config(call.args)
        if pol_cfg is not None and pol_cfg not in files:
            files.append(pol_cfg)
    # a named word that is neither in the base nor a file in the tree is no file of the gate's (`./check.sh` the
    # agent has not written yet: the gate fails to start, as before)
    tree_now = {f: read_tree(tree, f) for f in files}
    based = _base_blobs(tree, base, files)
    files = [f for f in files if based[f] is not None or f in gc.PYTEST_CONFIGS or tree_now[f] not in (None, "a folder")]
    prep.files = files
    prep.base = {f: based[f] for f in files}
    diff = gc.config_differences(prep.base, {f: tree_now[f] for f in files})
    if diff:
        prep.refused = (f"gate {name}: not run: its configuration is the base's, and the tree changed it: "
                        + "; ".join(diff[:8]) + (f" (+{len(diff) - 8} more)" if len(diff) > 8 else ""))
        return prep
    own.mkdir(parents=True, exist_ok=True)
    for f in files:  # the base's bytes, bound read-only over the tree's (bwrap, container) while the gate runs
        b = prep.base.get(f)
        # only where the tree holds the very bytes: a shared config whose other sections changed (a new dependency)
        # stays the tree's, its pytest section read once as pytest starts, before any code under test
        if b is not None and tree_now[f] == b:
            copy = own / "base" / f
            copy.parent.mkdir(parents=True, exist_ok=True)
            if copy.exists():  # a redone iteration: healer's own copy, read-only, written again
                os.chmod(copy, 0o644)
            copy.write_bytes(b)
            os.chmod(copy, 0o444)
            prep.over.append((copy, tree / f))
    if call is None:
        prep.note = f"gate {name}: exit code decides; its environment is healer's (no PATH entry inside the tree)"
        return prep
    texts = {n: gc._text(prep.base.get(n)) for n in gc.PYTEST_CONFIGS}
    pol_cfg = gc.policy_config(call.args)
    cfg_name = pol_cfg if pol_cfg is not None and prep.base.get(pol_cfg) is not None else gc.config_file(texts)
    cfg_text = gc._text(prep.base.get(cfg_name)) if cfg_name else None
    if cfg_name is not None:
        config = str(tree / cfg_name)
    else:
        config = str(own / EMPTY_INI)
        (own / EMPTY_INI).write_text("[pytest]\n")
    rep = own / f"{_safe(name)}.junit.xml"
    rep.write_bytes(b"")
    prep.report = rep
    prep.argv = gc.pytest_argv(call, tree=str(tree), config=config, report=str(rep),
                               path_entries=gc.pythonpath(cfg_name, cfg_text, str(tree), call.module))
    ao = gc.addopts(cfg_name, cfg_text)
    prep.check_expected = not gc.narrowed(call.args, ao)
    if prep.check_expected:
        roots = gc.selected_roots(call.args, cfg_name, cfg_text)
        prot = [p for p in all_base if protected(p, protected_paths)]
        tests = gc.test_files(prot, roots, gc.python_files(cfg_name, cfg_text))
        for p, src in _base_blobs(tree, base, tests).items():
            if src is not None:
                prep.expected += gc.expected_tests(p, src.decode("utf-8", "replace"))
        confs = [p for p in all_base if gc.is_conftest(p)]  # the base's: protected, or checked equal above
        prep.expected = gc.skipping_conftests(prep.expected, {p: (b or b"").decode("utf-8", "replace")
                                                              for p, b in _base_blobs(tree, base, confs).items()})
    prep.note = (f"gate {name}: pytest, judged by its report (config: {cfg_name or 'none'} as the base has it; "
                 f"{len(prep.expected)} protected test(s) due" + ("" if prep.check_expected else
                                                                   "; a narrowed selection: not counted") + ")")
    return prep


def confine(profile, prep: Prepared):
    """The gate's sandbox profile: `profile` (None: unconfined) with the report file writable and the base's
    copies bound read-only over the tree's files."""
    if profile is None:
        return None
    rw_last = [*profile.rw_last, *([prep.report] if prep.report is not None else [])]
    return replace(profile, rw_last=rw_last, over=[*profile.over, *prep.over])


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:40] or "gate"


def read_report(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        return f.read(REPORT_CAP + 1)[:REPORT_CAP]


def judge(prep: Prepared, tree: Path, exit_code: int | None) -> tuple[bool, str]:
    """After the gate ran: (passed, one line). Its files compared again, then the report (pytest) or the exit
    code (any other gate)."""
    tree = Path(os.path.abspath(tree))
    if prep.base or prep.files:
        now = {f: read_tree(tree, f) for f in prep.files}
        diff = gc.config_differences({f: prep.base.get(f) for f in prep.files}, now) if prep.base else []
        if diff:
            return False, "the gate's configuration changed while it ran: " + "; ".join(diff[:8])
    if prep.report is None:
        return exit_code == 0, f"exit {exit_code}"
    j = gc.judge(read_report(prep.report), prep.expected, exit_code, check_expected=prep.check_expected)
    return j.outcome == gc.PASS, j.why
