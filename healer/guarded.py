"""What healer guards from the agent whatever `loop.protected_paths` says (issue 39): pure functions of the policy.

Two classes of files the agent writes and something later reads, runs or merges:

- **The fleet's configuration** (`config_paths`): `healer.yaml`, `.healer/`, the policy file and the runbooks it
  includes, and every file the policy names as a command (a gate's script, a `make` gate's Makefile, a `python -m
  MODULE` gate's module, the agent's own program, `fleet.loop_command`'s and a `command` notifier's programs). A loop
  puts them back like any protected path, its commit refuses them and the fleet's merge refuses a proposal that
  changes one.
- **Agent-instruction and tool-config files** (`INSTRUCTION_FILES`, extended by `loop.instruction_files`, excepted by
  `loop.instruction_files_allow`): what steers the next program that opens the tree (an agent CLI's settings and
  hooks, AGENTS.md, an editor's tasks, direnv, CI workflows). Quarantined after every agent step and before the
  next, never committed, never merged.

Patterns are `protected()`'s: `dir/` (a folder), `name` (a file or a folder), globs as fnmatch reads them (`*`
crosses `/`). Nothing here reads a file, the clock or the environment (tests/spine/test_core_pure.py).
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence

OWN = ("healer.yaml", ".healer/")  # the policy's usual home and healer's state: never the agent's

# the default list (docs/security.md "Instruction files"): a name is matched at any depth, a folder (`x/`) wherever it
# appears; `loop.instruction_files` adds to it, `loop.instruction_files_allow` takes out
INSTRUCTION_FILES = (
    # agent CLIs: settings, hooks, MCP servers, memory and instructions
    ".claude/", "CLAUDE.md", "CLAUDE.local.md", ".mcp.json", "AGENTS.md", "AGENTS.override.md", ".codex/",
    "GEMINI.md", ".gemini/", ".cursor/", ".cursorrules", ".windsurfrules", ".clinerules", ".aider.conf.yml",
    ".github/copilot-instructions.md",
    # programs a developer's tools run on opening or entering the tree, or on the next commit, build or CI run
    ".envrc", ".vscode/", ".idea/", ".devcontainer/", ".github/workflows/", ".pre-commit-config.yaml", ".husky/",
    ".gitattributes", ".gitmodules", ".cargo/config.toml", ".cargo/config", ".yarnrc.yml", ".npmrc",
)

_INTERPRETERS = re.compile(r"(python|pypy)[0-9.]*|sh|bash|dash|zsh|ksh|node|nodejs|perl|ruby|php|bun|deno")
_VALUED = {"python": {"-W", "-X", "-Q"}, "sh": {"-o", "-O"}}  # interpreter options that take the next argument
_RUNNERS = {  # a program that runs what a file of the tree defines: that file
    "make": ("Makefile", "makefile", "GNUmakefile"), "gmake": ("Makefile", "makefile", "GNUmakefile"),
    "just": ("justfile", "Justfile", ".justfile"), "tox": ("tox.ini",), "nox": ("noxfile.py",),
    "invoke": ("tasks.py",), "inv": ("tasks.py",), "rake": ("Rakefile",), "task": ("Taskfile.yml", "Taskfile.yaml"),
}
_CONFIG_OPTS = ("--config", "--config-file", "--rcfile", "--settings", "--makefile", "--file", "-f", "-c")


def config_paths(policy: Mapping, base: str = "", root: str | None = None) -> list[str]:
    """The fleet's configuration in a tree, as patterns: OWN, the policy file's own path `policy_file` when given,
    the runbooks `include_runbooks` names (relative to `base`, the policy file's folder in the tree) and every file
    the policy's commands name (`command_paths`). `policy`: a policy's JSON dump (`model_dump(mode="json")`), or
    one section of it as `{"loop": ...}`. `root`: the tree's absolute path (absolute names under it count)."""
    out: list[str] = list(OWN)
    loop, fleet = policy.get("loop") or {}, policy.get("fleet") or {}
    argvs: list[Sequence[str]] = [g.get("run") or [] for g in loop.get("gates") or []]
    argvs.append((loop.get("agent") or {}).get("command") or [])
    argvs += [g.get("run") or [] for key in ("merge_gates", "main_gates") for g in fleet.get(key) or []]
    argvs.append(fleet.get("loop_command") or [])
    argvs += [n.get("command") or [] for n in (policy.get("notify") or {}).get("notifiers") or []]
    argvs.append(((policy.get("repair_agent") or {}).get("agent") or {}).get("command") or [])
    for argv in argvs:
        out += command_paths(argv, root)
    for entry in policy.get("include_runbooks") or []:
        rel = _in_tree(posixpath.join(base, entry) if base and not entry.startswith("/") else entry, root)
        if rel:
            out.append(rel + "/" if not rel.endswith((".yaml", ".yml")) else rel)
    return _unique(out)


def command_paths(argv: Sequence[str], root: str | None = None) -> list[str]:
    """The files of the tree an argv runs or reads as its program: argv[0] when it is a path, an interpreter's script
    or `-m` module, a runner's file (`make`: the Makefiles, `-f FILE`, `-C DIR`), a `--config FILE` of any program.
    `{workdir}/x` and `{root}/x` are `x`; another placeholder names nothing here."""
    args = [_unplace(a) for a in argv]
    out: list[str] = []
    i = 0
    if args and args[0] is not None and posixpath.basename(args[0]) == "env":
        i = 1  # env VAR=x prog ...: the program after the assignments
        while i < len(args) and args[i] is not None and ("=" in (args[i] or "") or (args[i] or "").startswith("-")):
            i += 1
    if i >= len(args) or args[i] is None:
        return out
    exe = args[i] or ""
    name = posixpath.basename(exe)
    if "/" in exe:
        out.append(exe)
    rest = args[i + 1:]
    if _INTERPRETERS.fullmatch(name):
        out += _interpreted(name, rest)
    elif name in _RUNNERS:
        out += _runner(name, rest)
    for j, a in enumerate(rest):  # a config file the program is told to read
        if a is None:
            continue
        opt, eq, val = a.partition("=")
        if opt in _CONFIG_OPTS and not _INTERPRETERS.fullmatch(name):
            v = val if eq else (rest[j + 1] if j + 1 < len(rest) else None)
            if v and ("/" in v or "." in v):
                out.append(v)
    return _unique(p for o in out if (p := _in_tree(o, root)))


def _interpreted(name: str, rest: Sequence[str | None]) -> list[str]:
    python = name.startswith(("python", "pypy"))
    valued = _VALUED["python"] if python else _VALUED["sh"] if name.endswith("sh") else set()
    safe = False  # python -P / -I: the current folder is not on the import path
    j = 0
    while j < len(rest):
        a = rest[j]
        if a is None:
            return []
        if python and a.startswith("-") and not a.startswith("--") and a[1:2] not in ("m", "c") and \
                ("P" in a[1:] or "I" in a[1:]):
            safe = True
        if a == "-m" and python and j + 1 < len(rest) and rest[j + 1]:
            mod = str(rest[j + 1])
            if safe:
                return []
            parts = mod.split(".")
            found = [f"{'/'.join(parts)}.py", f"{'/'.join(parts)}/"]
            found += [f"{'/'.join(parts[:k])}/__init__.py" for k in range(1, len(parts))]
            return found + [f"{parts[0]}.py"] if len(parts) > 1 else found
        if a.startswith("-m") and python and len(a) > 2:
            return _interpreted(name, ["-m", a[2:]])
        if a in ("-c", "-e", "--eval") or (python and a.startswith("-c")):
            return []  # code on the command line: no file
        if a in valued:
            j += 2
            continue
        if a == "--" or not a.startswith("-"):
            script = rest[j + 1] if a == "--" and j + 1 < len(rest) else a
            return [script] if script and script != "-" else []
        j += 1
    return []


def _runner(name: str, rest: Sequence[str | None]) -> list[str]:
    files = list(_RUNNERS[name])
    out = list(files)
    for j, a in enumerate(rest):
        if a is None:
            continue
        nxt = rest[j + 1] if j + 1 < len(rest) else None
        if name in ("make", "gmake") and a in ("-C", "--directory") and nxt:
            out += [posixpath.join(nxt, f) for f in files]
        elif name in ("make", "gmake") and a.startswith("--directory="):
            out += [posixpath.join(a.split("=", 1)[1], f) for f in files]
    return out


def _unplace(a: str) -> str | None:
    """`{workdir}/x` -> `x`; any other placeholder: None (it names something healer fills in, not a tree file)."""
    for p in ("{workdir}/", "{root}/"):
        if a.startswith(p):
            a = "./" + a[len(p):]  # a path in the tree, however it is written
    return None if "{" in a else a


def _in_tree(path: str, root: str | None) -> str | None:
    """`path` relative to the tree's top, normalised; None when it leaves the tree (or is absolute elsewhere)."""
    if path.startswith("/"):
        if not root:
            return None
        r = root.rstrip("/") + "/"
        if not path.startswith(r):
            return None
        path = path[len(r):]
    trail = "/" if path.endswith("/") else ""
    norm = posixpath.normpath(path)
    if norm in (".", "") or norm == ".." or norm.startswith("../"):
        return None
    return norm + trail


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def instruction_patterns(extra: Sequence[str] = ()) -> list[str]:
    """The instruction-file entries in force: the default list and `loop.instruction_files`."""
    return _unique([*INSTRUCTION_FILES, *extra])


def at_any_depth(entries: Sequence[str]) -> list[str]:
    """`protected()` patterns matching each entry at the top and below it: `AGENTS.md` -> `AGENTS.md`,
    `*/AGENTS.md`; `.claude/` -> `.claude/`, `*/.claude/*`. A glob entry is taken as written."""
    out: list[str] = []
    for e in entries:
        e = e[2:] if e.startswith("./") else e
        if not e or any(c in e for c in "*?["):
            out += [e] if e else []
            continue
        out += [e, f"*/{e}*" if e.endswith("/") else f"*/{e}"]
        if not e.endswith("/"):
            out.append(f"*/{e}/*")  # a folder of that name: everything in it
    return _unique(out)


def instruction_file(path: str, entries: Sequence[str], allow: Sequence[str] = ()) -> bool:
    """`path` is an instruction or tool-config file (any depth) that the policy does not allow."""
    return protected(path, at_any_depth(entries)) and not protected(path, at_any_depth(allow))


def protected(path: str, patterns: Sequence[str]) -> bool:
    """`path` (relative to the tree's top) is one the patterns name: `dir/` a folder and what it holds, `name` that
    file or folder, a glob as fnmatch reads it."""
    for pat in patterns:
        pat = pat[2:] if pat.startswith("./") else pat
        if not pat:
            continue
        if pat.endswith("/"):
            if path.startswith(pat) or path == pat.rstrip("/"):
                return True
        elif path == pat or path.startswith(pat + "/") or fnmatch.fnmatchcase(path, pat):
            return True
    return False


def top_entries(entries: Sequence[str]) -> list[str]:
    """The entries as names at the tree's top (no glob): what is compared on disk, where git may not see it."""
    return [e.rstrip("/") for e in entries if e and not any(c in e for c in "*?[")]
