"""The one git runner, and the git questions every part of healer asks: worktrees, heads,
merges, untracked and dirty files.

Never a `reset --hard`, never a force push, never a forced ref move: main only
advances by fast-forward to a commit that descends from it (compare-and-swap).
Read-only commands run with --no-optional-locks, so asking about a worktree an agent is
using never takes its index lock.

No program that a repository (or an agent that wrote into it) configured ever runs in a git
command healer runs: `_exec` is the one place every command goes through, and it adds
SAFE_CONFIG (hooks at /dev/null, no fsmonitor, no signing, no submodule recursion, no auto
gc) plus, for the drivers the repository's own config defines (filter, diff, merge), an
override that disables each one; porcelain diffs get --no-ext-diff --no-textconv. Command
line `-c` beats every config file, so nothing the agent writes in .git/config wins. No system, global or
XDG config or attributes are read at all (`_NO_USER_CONFIG`): only the repository's and healer's.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from healer import walk
from healer.errors import GitError  # GitError is defined there (no errors <-> git cycle); re-exported
from healer.procs import environ

TIMEOUT = 120.0
# for commits healer makes itself (merge commits): `-c` beats the repository's config but
# not GIT_AUTHOR_*/GIT_COMMITTER_* set by the user
IDENTITY = ("-c", "user.name=healer", "-c", "user.email=healer@localhost")


@dataclass(frozen=True)
class Out:
    code: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        return (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).strip()


# config that would make git run a program; `-c` on the command line beats every config file
SAFE_CONFIG = (
    "-c", "core.hooksPath=/dev/null",     # no hook ever runs (a path that is not a folder holds no hook)
    "-c", "core.fsmonitor=false",
    "-c", "diff.external=",
    "-c", "commit.gpgSign=false", "-c", "tag.gpgSign=false",
    "-c", "merge.verifySignatures=false", "-c", "log.showSignature=false",
    "-c", "submodule.recurse=false",
    "-c", "gc.auto=0", "-c", "maintenance.auto=false",
    "-c", "credential.helper=", "-c", "protocol.ext.allow=never",
    # what the repository's own config (agent-writable unsandboxed) could set to change what git reads or prints
    "-c", "core.attributesFile=/dev/null",  # no attribute file beyond the tree's and info/attributes
    "-c", "core.trustctime=true", "-c", "core.checkStat=default",  # a same-size edit with mtime set back still shows
    "-c", "core.sparseCheckout=false",  # `add -A` sees every path, none hidden behind a sparse pattern
    "-c", "core.sshCommand=ssh", "-c", "core.askPass=",  # no program of the repository's on a fetch or push
    "-c", "color.ui=false", "-c", "core.quotePath=true",  # output healer parses stays as git's default prints it
)
# git reads no configuration but the repository's own (neutralised above) and the command line: no system file,
# no global or XDG one (`~/.gitconfig`, `~/.config/git/{config,attributes,ignore}`), no system attributes. An
# unsandboxed agent can write the user's files: a clean filter there would store an intact test while the disk
# holds a gutted one. Identity: the loop and the fleet commit as healer (IDENTITY, gitops.IDENTITY_ENV).
NO_XDG = "/dev/null/healer-no-xdg"  # never a folder: git reads nothing under it (ENOTDIR is "missing" to git)
_NO_USER_CONFIG = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_ATTR_NOSYSTEM": "1",
                   "XDG_CONFIG_HOME": NO_XDG,
                   # a `refs/replace/<base>` an agent made would show healer another commit (another tree) as the
                   # run's base wherever it asks; the guard removes such a ref, and healer's git never reads one
                   "GIT_NO_REPLACE_OBJECTS": "1"}
# environment that would make git run a program
_ENV_DROP = ("GIT_EXTERNAL_DIFF", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_ASKPASS", "SSH_ASKPASS", "GIT_PROXY_COMMAND",
             "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_CONFIG_SYSTEM", "GIT_CONFIG", "GIT_ATTR_SOURCE",
             "GIT_REPLACE_REF_BASE")
_SAFE_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_EDITOR": ":", "GIT_SEQUENCE_EDITOR": ":", "GIT_PAGER": "cat",
             "GIT_OPTIONAL_LOCKS": "0"}
_DIFFING = {"diff", "log", "show", "whatchanged", "format-patch"}
# (scope, key) of repository config that names a program -> the override that disables it
_DRIVER_KEYS = {"clean": "", "smudge": "", "process": "", "command": "", "textconv": "", "driver": "false"}

_driver_cache: dict[str, tuple[tuple, tuple[str, ...]]] = {}


def _stat_key(paths: list[Path] | list[str]) -> tuple:
    out: list[tuple] = []
    for p in paths:
        p = str(p)  # plain strings: this runs before every git command
        if os.path.basename(p) == ".git":  # only whether it exists: its mtime moves with every index write
            out.append((p, os.path.lexists(p)))
            continue
        try:
            s = os.stat(p)
            out.append((p, s.st_mtime_ns, s.st_size, s.st_ino))
        except OSError:
            out.append((p, None))
    return tuple(out)


@dataclass(frozen=True)
class Layout:
    """Where a working tree's git lives (absolute paths)."""
    top: Path
    git_dir: Path
    common: Path
    index: Path


_layouts: dict[str, tuple[tuple, Layout]] = {}


def _dot_git(top: Path) -> tuple:
    try:
        s = os.lstat(os.path.join(top, ".git"))  # a string join: the loop asks this dozens of times a run
        return (s.st_dev, s.st_ino)
    except OSError:
        return ()


def layout(cwd: str | Path) -> Layout | None:
    """The working tree holding `cwd` and its git dirs, from one `rev-parse` (None outside a working
    tree). Cached while the top's `.git` stays the same file or folder: the loop asks every iteration."""
    key = str(cwd)
    hit = _layouts.get(key)
    if hit is not None and _dot_git(hit[1].top) == hit[0]:
        return hit[1]
    lay = _plain_layout(key)
    if lay is not None:
        _layouts[key] = (_dot_git(lay.top), lay)
        return lay
    try:  # no driver override needed (rev-parse runs none), and asking for them would ask this again
        p = subprocess.run(["git", *SAFE_CONFIG, "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-dir",
                            "--git-common-dir", "--git-path", "index"], cwd=key, capture_output=True, env=_env(None),
                           stdin=subprocess.DEVNULL, timeout=TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = p.stdout.decode("utf-8", "surrogateescape").split("\n")
    if p.returncode != 0 or len(parts) < 4 or not all(parts[:4]):
        return None
    lay = Layout(*(Path(x) for x in parts[:4]))
    _layouts[key] = (_dot_git(lay.top), lay)
    return lay


# what would make git look for the repository elsewhere, or read its layout otherwise
def private_objects_env(private: Path, store: Path) -> dict[str, str]:
    """The environment of a git that writes its objects to `private` and reads the repository's `store` too
    (the sandboxed programs' object directory: healer/loop/objects.py says why)."""
    return {"GIT_OBJECT_DIRECTORY": str(private), "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(store)}


_LAYOUT_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
               "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM")
_HEX = frozenset("0123456789abcdef")


def _plain_layout(cwd: str) -> Layout | None:
    """`layout(cwd)` read from the files, without a git process, where that is git's own answer: the nearest
    `.git` above the physical cwd (not across a file system), a folder or a `gitdir:` file, a valid git
    directory (HEAD, objects, refs) owned by this user as the work tree is, `commondir` followed, and no
    config that could move the work tree (core.worktree, core.bare) or environment that redirects git.
    None: git answers (tests/loop/test_gitindex.py compares the two in every layout)."""
    if any(k in os.environ for k in _LAYOUT_ENV):
        return None
    try:
        here = os.path.realpath(cwd)
        dev = os.stat(here).st_dev
        d = here
        while True:
            dot = os.path.join(d, ".git")
            try:
                st = os.lstat(dot)
                break
            except FileNotFoundError:
                pass
            if all(os.path.exists(os.path.join(d, n)) for n in ("HEAD", "objects", "refs")):
                return None  # perhaps a git directory itself (bare, or inside .git): git knows
            parent = os.path.dirname(d)
            if parent == d or os.stat(parent).st_dev != dev:
                return None  # none up to the root or a mount point: git words its own refusal
            d = parent
        top, uid = d, os.getuid()
        if stat.S_ISDIR(st.st_mode):
            git_dir = dot
        elif stat.S_ISREG(st.st_mode) and st.st_uid == uid:
            with open(dot, "rb") as f:
                text = f.read(4096).decode("utf-8", "surrogateescape")
            if not text.startswith("gitdir: ") or "\n" in text.rstrip("\n"):
                return None
            git_dir = os.path.realpath(os.path.join(top, text[8:].rstrip("\n")))
        else:
            return None
        if here == git_dir or here.startswith(git_dir + os.sep):
            return None  # inside the git directory: not a work tree
        common = git_dir
        if os.path.lexists(os.path.join(git_dir, "commondir")):
            with open(os.path.join(git_dir, "commondir"), "rb") as f:
                common = os.path.realpath(os.path.join(git_dir, f.read(4096).decode("utf-8", "surrogateescape").rstrip("\n")))
        with open(os.path.join(git_dir, "HEAD"), "rb") as f:
            head = f.read(256).decode("ascii", "replace").rstrip("\n")
        if not (head.startswith("ref: refs/") or (len(head) == 40 and set(head) <= _HEX)):
            return None
        if not (os.path.isdir(os.path.join(common, "objects")) and os.path.isdir(os.path.join(common, "refs"))):
            return None
        if any(os.stat(p).st_uid != uid for p in (top, git_dir, common)):
            return None  # another owner: git's safe.directory check decides
        for cfg in (os.path.join(common, "config"), os.path.join(git_dir, "config.worktree")):
            try:
                with open(cfg, "rb") as f:
                    conf = f.read().lower()
            except FileNotFoundError:
                continue
            if b"worktree" in conf or b"include" in conf or any(
                    ln.strip().startswith(b"bare") and ln.replace(b" ", b"").replace(b"\t", b"").strip() != b"bare=false"
                    for ln in conf.splitlines()):
                return None
    except (OSError, ValueError):
        return None
    return Layout(Path(top), Path(git_dir), Path(common), Path(git_dir) / "index")


def _config_files(cwd: str) -> list[Path]:
    """The repository-scope config files that git would read in `cwd` (cheap to stat)."""
    files = [Path(cwd) / ".git"]
    lay = layout(cwd)
    if lay is not None:
        files += [lay.common / "config", lay.git_dir / "config.worktree", lay.common / "config.worktree"]
    else:  # not a working tree (a bare repository): its dirs still hold config
        p = subprocess.run(["git", *SAFE_CONFIG, "rev-parse", "--path-format=absolute", "--git-dir", "--git-common-dir"],
                           cwd=cwd, capture_output=True, text=True, env=_env(None), stdin=subprocess.DEVNULL,
                           timeout=TIMEOUT)
        if p.returncode == 0:
            gd, cd = (p.stdout.split("\n") + ["", ""])[:2]
            files += [Path(cd) / "config", Path(gd) / "config.worktree", Path(cd) / "config.worktree"]
    return files


_DRIVER_WORDS = (b"filter", b"diff", b"merge", b"include")


def _cannot_name_a_driver(files: list[Path]) -> bool:
    """True when the repository's config files cannot define a filter, diff or merge driver: none of them
    holds the words that such a section (`[filter "x"]`, `[diff.x]`, any case) or an include must hold.
    Then `git config --list` would list no driver at local or worktree scope, and that git process is
    saved (most repositories). Any doubt (a file unreadable, or one of the words anywhere, even in a
    value) asks git as before."""
    return not mentions(files, _DRIVER_WORDS)


def mentions(files: Iterable[str | Path], words: tuple[bytes, ...], but=None) -> bool:
    """Any of `words` (lower case) in any of the files (any case); a missing file is skipped, an
    unreadable one counts as a yes (the caller then asks git instead of trusting a shortcut). `but`: a
    compiled bytes pattern whose matches (in the lower-cased text) do not count."""
    for f in files:
        try:
            with open(f, "rb") as fh:
                text = fh.read().lower()
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            return True
        if but is not None:
            text = but.sub(b"", text)
        if any(w in text for w in words):
            return True
    return False


def driver_overrides(cwd: str | Path) -> tuple[str, ...]:
    """`-c` pairs that disable every filter/diff/merge driver defined in the repository's own
    config (local or worktree scope, includes too). Global and system config are not read at all (`_env`).
    Cached on the stat of the config files: a few stat calls per command."""
    key_cwd = str(cwd)
    hit = _driver_cache.get(key_cwd)
    if hit is not None and _stat_key([f[0] for f in hit[0]]) == hit[0]:
        return hit[1]
    try:
        files = _config_files(key_cwd)
        if _cannot_name_a_driver(files[1:]):
            _driver_cache[key_cwd] = (_stat_key(files), ())
            return ()
        p = subprocess.run(["git", *SAFE_CONFIG, "config", "--list", "--show-scope", "--show-origin", "-z"], cwd=key_cwd,
                           capture_output=True, env=_env(None), stdin=subprocess.DEVNULL, timeout=TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    over: list[str] = []
    seen: set[str] = set()
    recs = p.stdout.decode("utf-8", "surrogateescape").split("\0") if p.returncode == 0 else []
    # -z with --show-scope --show-origin: scope NUL origin NUL key\nvalue NUL
    for i in range(0, len(recs) - 2, 3):
        scope, origin, kv = recs[i], recs[i + 1], recs[i + 2]
        if scope not in ("local", "worktree"):
            continue
        if origin.startswith("file:"):
            f = Path(origin[5:])
            files.append(f if f.is_absolute() else Path(key_cwd) / f)
        name = kv.split("\n", 1)[0]
        parts = name.split(".")
        if len(parts) < 3 or parts[0].lower() not in ("filter", "diff", "merge"):
            continue
        last = parts[-1].lower()
        if last not in _DRIVER_KEYS or (parts[0].lower() == "merge") != (last == "driver"):
            continue
        if name in seen:
            continue
        seen.add(name)
        over += ["-c", f"{name}={_DRIVER_KEYS[last]}"]
        if parts[0].lower() == "filter":
            over += ["-c", f"{'.'.join(parts[:-1])}.required=false"]
    result = tuple(over)
    _driver_cache[key_cwd] = (_stat_key(files), result)
    return result


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    full = environ()
    for k in _ENV_DROP:
        full.pop(k, None)
    full.update(_SAFE_ENV)
    full.update(_NO_USER_CONFIG)
    if extra:
        full.update(extra)
    return full


def _subcommand(args: tuple[str, ...]) -> tuple[int, str]:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in ("-c", "-C") else 1
    return i, (args[i] if i < len(args) else "")


def argv(cwd: str | Path, *args: str) -> list[str]:
    """The full, neutralised git argv healer runs for `args` in `cwd`."""
    i, sub = _subcommand(args)
    if sub in _DIFFING:
        args = (*args[:i + 1], "--no-ext-diff", "--no-textconv", *args[i + 1:])
    return ["git", "--no-optional-locks", *SAFE_CONFIG, *driver_overrides(cwd), *args]


def _exec(cwd: str | Path, args: tuple[str, ...], env: dict[str, str] | None, timeout: float,
          text: bool, input: bytes | None = None) -> subprocess.CompletedProcess:
    try:
        if input is not None:
            return subprocess.run(argv(cwd, *args), cwd=str(cwd), capture_output=True, input=input,
                                  env=_env(env), timeout=timeout)
        return subprocess.run(argv(cwd, *args), cwd=str(cwd), capture_output=True, text=text,
                              env=_env(env), stdin=subprocess.DEVNULL, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise GitError(f"{cwd}: git {' '.join(args)} took more than {timeout:.0f}s") from e
    except (FileNotFoundError, NotADirectoryError) as e:
        raise GitError(f"{cwd}: cannot run git ({e})") from e


def _failed(cwd: str | Path, args: tuple[str, ...], code: int, text: str) -> GitError:
    last = text.strip().splitlines()[-1] if text.strip() else ""
    return GitError(f"{cwd}: git {' '.join(args)} failed ({code}): {last}")


def run(cwd: str | Path, *args: str, check: bool = True, env: dict[str, str] | None = None,
        timeout: float = TIMEOUT) -> Out:
    """Run git in `cwd`; `env` adds to the environment. Raises GitError on failure unless check=False."""
    p = _exec(cwd, args, env, timeout, text=True)
    out = Out(p.returncode, p.stdout.strip(), p.stderr.strip())
    if check and p.returncode != 0:
        raise _failed(cwd, args, p.returncode, out.text)
    return out


def raw(cwd: str | Path, *args: str, timeout: float = TIMEOUT, input: bytes | None = None,
        env: dict[str, str] | None = None) -> bytes:
    """Git's stdout as bytes, untouched (blobs, -z listings); raises GitError on failure."""
    p = _exec(cwd, args, env, timeout, text=False, input=input)
    if p.returncode != 0:
        raise _failed(cwd, args, p.returncode, p.stderr.decode(errors="replace"))
    return p.stdout


def is_repo(path: str | Path) -> bool:
    return Path(path).is_dir() and run(path, "rev-parse", "--git-dir", check=False).code == 0


def toplevel(path: str | Path) -> Path | None:
    """The top of the working tree that holds `path`, or None outside any."""
    if not Path(path).is_dir():
        return None
    o = run(path, "rev-parse", "--show-toplevel", check=False)
    return Path(o.stdout) if o.code == 0 and o.stdout else None


def is_toplevel(path: str | Path) -> bool:
    """Is `path` itself the top of a git working tree (not merely a folder inside one)?"""
    top = toplevel(path)
    return top is not None and top.resolve() == Path(path).resolve()


def main_repo(worktree: str | Path) -> Path:
    """The repository that owns a linked worktree (where `git worktree remove` must run)."""
    common = Path(run(worktree, "rev-parse", "--path-format=absolute", "--git-common-dir").stdout)
    return common.parent if common.name == ".git" else common


def rev(cwd: str | Path, ref: str = "HEAD") -> str | None:
    o = run(cwd, "rev-parse", "--verify", "-q", ref + "^{commit}", check=False)
    return o.stdout or None


def is_ancestor(cwd: str | Path, a: str, b: str) -> bool:
    return run(cwd, "merge-base", "--is-ancestor", a, b, check=False).code == 0


def current_branch(cwd: str | Path) -> str | None:
    o = run(cwd, "symbolic-ref", "-q", "--short", "HEAD", check=False)
    return o.stdout or None


def _status(path: str | Path) -> list[str]:
    # raw: a status line may start with a space (" M name"), which a stripped output loses
    out = raw(path, "status", "--porcelain=v1", "-z", "--ignored=no", "--untracked-files=all")
    return out.decode("utf-8", "surrogateescape").split("\0")


def untracked(path: str | Path) -> list[str]:
    """Untracked, not ignored files (relative to the worktree): the 'unknown files'."""
    return [item[3:] for item in _status(path) if item.startswith("?? ")]


def dirty(path: str | Path) -> list[str]:
    """Every file whose content exists only in this worktree: untracked, modified, added, renamed (not deleted)."""
    items = _status(path)
    out: list[str] = []
    i = 0
    while i < len(items):
        item = items[i]
        i += 1
        if len(item) < 4:
            continue
        code, name = item[:2], item[3:]
        if code[0] in "RC":
            i += 1  # -z puts the rename source in the next field
        if code == "??" or (code[1] != "D" and code[0] != "D"):
            if (Path(path) / name).is_file() or (Path(path) / name).is_symlink():
                out.append(name)
    return out


def unsaved(path: str | Path) -> list[str]:
    """Every file of this worktree whose content git does not hold, so `git worktree remove --force` would
    destroy it: `dirty()`, and what `status` leaves out of it: ignored files (the loop's own evidence under
    `.healer/` too), the files of an untracked nested repository, and tracked files an index flag
    (`--assume-unchanged`, `--skip-worktree`, the agent's to set) hides from status. Links as links."""
    top = Path(path)
    out = set(dirty(top))
    items = raw(top, "status", "--porcelain=v1", "-z", "--ignored=matching", "--untracked-files=all")
    for item in items.decode("utf-8", "surrogateescape").split("\0"):
        if item[:3] not in ("!! ", "?? "):
            continue
        name = item[3:]
        p = top / name
        if p.is_symlink() or p.is_file():
            out.add(name.rstrip("/"))
        elif p.is_dir():  # an ignored folder, or a nested repository status does not descend into
            got = walk.walk(str(p))  # iterative and bounded: a 1,200-deep folder an agent made is no RecursionError
            base = name.rstrip("/")
            for r, st in got.entries:
                if not stat.S_ISDIR(st.st_mode):
                    out.add(f"{base}/{r}")
            out.update(f"{base}/{r}" for r in got.over if r)  # too deep to list: kept whole
    for rec in raw(top, "ls-files", "-v", "-z").decode("utf-8", "surrogateescape").split("\0"):
        if len(rec) > 2 and (rec[:1].islower() or rec[:1] == "S"):
            f = top / rec[2:]
            if f.is_symlink() or f.is_file():
                out.add(rec[2:])
    return sorted(out)


def tracked(path: str | Path) -> bool:
    """Is this file tracked by the git repository it sits in? False outside any repository."""
    p = Path(path)
    return p.parent.is_dir() and run(p.parent, "ls-files", "--error-unmatch", "--", p.name, check=False).code == 0


def ensure_excluded(root: str | Path, pattern: str = ".healer/") -> None:
    """Keep healer's own folder out of every worktree's status, even if .gitignore is not committed."""
    common = Path(run(root, "rev-parse", "--git-common-dir").stdout)
    if not common.is_absolute():
        common = Path(root) / common
    ex = common / "info" / "exclude"
    ex.parent.mkdir(parents=True, exist_ok=True)
    lines = ex.read_text().splitlines() if ex.exists() else []
    if pattern not in lines:
        with ex.open("a") as f:
            f.write(("\n" if lines and lines[-1] else "") + pattern + "\n")


def worktree_entries(root: str | Path) -> dict[str, dict[str, str]]:
    """git's worktree records: resolved path -> the porcelain attributes (`locked` holds the lock's reason)."""
    out: dict[str, dict[str, str]] = {}
    cur: dict[str, str] | None = None
    for line in run(root, "worktree", "list", "--porcelain").stdout.splitlines():
        if line.startswith("worktree "):
            cur = out.setdefault(str(Path(line[len("worktree "):]).resolve()), {})
        elif cur is not None and line:
            key, _, value = line.partition(" ")
            cur[key] = value
    return out


def worktree_paths(root: str | Path) -> set[str]:
    return set(worktree_entries(root))


def half_made(root: str | Path, path: str | Path) -> str | None:
    """Why the worktree at `path` is the leftover of a `git worktree add` killed halfway (None: it is not).

    git registers the worktree and locks its entry ("initializing") before it checks the files out, and
    unlocks it last: a kill in between leaves a locked entry over a partial checkout without an index,
    whose `git status` shows every file deleted (an agent committing there would delete them on main).
    A kill before registration leaves a folder git does not know, which every later `worktree add` refuses;
    a locked entry whose folder is gone is refused too ("missing but locked worktree")."""
    path = Path(path)
    entry = worktree_entries(root).get(str(path.resolve()))
    if entry is None:
        return "a folder git does not know (a `git worktree add` killed before it registered it)" \
            if path.exists() or path.is_symlink() else None
    locked = entry.get("locked")
    if locked is None:
        return None
    if not path.is_dir():
        return f"git's entry is locked ({locked or 'no reason given'}) and its folder is gone"
    if locked == "initializing" or not _has_index(path):
        return f"git's entry is locked ({locked or 'no reason given'}) over a checkout without an index: " \
               "a `git worktree add` killed halfway"
    return None  # locked by someone on purpose, and whole: left alone


def _has_index(worktree: Path) -> bool:
    try:
        text = (worktree / ".git").read_text()
    except OSError:
        return False
    gitdir = Path(text.partition("gitdir:")[2].strip())
    return (gitdir if gitdir.is_absolute() else worktree / gitdir).joinpath("index").exists()


def set_aside(root: str | Path, path: str | Path, to: str | Path) -> Path | None:
    """Undo what a killed `git worktree add` left at `path`, deleting nothing: git's entry is unlocked, the
    folder (whatever it holds) is renamed to `to`, and the stale entry is pruned. Returns where it went."""
    path, to = Path(path), Path(to)
    run(root, "worktree", "unlock", str(path), check=False)
    moved = None
    if path.exists() or path.is_symlink():
        to.parent.mkdir(parents=True, exist_ok=True)
        path.rename(to)
        moved = to
    run(root, "worktree", "prune", check=False)
    return moved


def add_worktree(root: str | Path, path: str | Path, branch: str, base: str) -> bool:
    """Check out `branch` at `path`, creating the branch from `base` if new. Returns True if created anew.

    An existing branch is reused (its commits kept); a registered worktree whose folder
    vanished is pruned from git's records first.
    """
    path = Path(path)
    if path.is_dir() and str(path.resolve()) in worktree_paths(root):
        return False
    run(root, "worktree", "prune")
    path.parent.mkdir(parents=True, exist_ok=True)
    if rev(root, f"refs/heads/{branch}"):
        run(root, "worktree", "add", str(path), branch)
    else:
        run(root, "worktree", "add", "-b", branch, str(path), base)
    return True


def remove_worktree(path: str | Path, root: str | Path | None = None, *, check: bool = True) -> None:
    """`git worktree remove --force`, then prune. Callers first quarantine every dirty file
    (remediation) or own the worktree outright (the fleet's scratch worktrees, check=False:
    nothing to remove is fine). `root` defaults to the repository that owns `path`."""
    if Path(path).exists():
        root = root if root is not None else main_repo(path)
        run(root, "worktree", "remove", "--force", str(path), check=check)
    if root is not None:
        run(root, "worktree", "prune", check=False)


def advance(root: str | Path, branch: str, old: str, new: str) -> None:
    """Move `branch` from `old` to `new`, a descendant of `old`; never a force.

    When the branch is checked out in `root`, a fast-forward merge updates the files too;
    otherwise a compare-and-swap ref update (fails if someone moved it meanwhile).
    """
    if not is_ancestor(root, old, new):
        raise GitError(f"{branch}: {new[:12]} does not descend from {old[:12]}; refusing to move {branch}")
    if current_branch(root) == branch:
        if rev(root) != old:
            raise GitError(f"{branch} moved while the proposal was gated")
        run(root, "merge", "--ff-only", "-q", new)
    else:
        run(root, "update-ref", "-m", "healer: merge proposal", f"refs/heads/{branch}", new, old)
