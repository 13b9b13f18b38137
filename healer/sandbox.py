"""Sandboxes for the programs healer runs on an agent's behalf (the loop's agent and gates).

bubblewrap (Debian package `bubblewrap`, the mechanism Claude Code's sandbox uses on Linux):
the agent sees the machine read-only (`--ro-bind / /`, a fresh /dev and /proc), with these
writable: its worktree (healer's own `.healer/` in it stays read-only), what git needs to
commit on the worktree's own branch (objects, the branch's ref folder and reflog, the
worktree's admin folder), a private temp dir (a tmpfs, $TMPDIR), and the paths the policy
lists. The repository's hooks, config, info/ and other refs stay read-only. Network is
optional (`--unshare-net`). The Docker socket is masked. Enforced by the kernel's mount
namespaces, not by a promise the agent is asked to keep.

`auto` uses bubblewrap when it works on this machine (probed once per process), else runs
unconfined and warns once; `none` runs unconfined (the loop then reports the writes it can
see outside the worktree, see healer/loop/watch.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from healer.errors import InvalidInput

MODES = ("auto", "bwrap", "none")
_probe: dict[str, str | None] = {}
_warned: set[str] = set()
SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock")


def socket_masks() -> list[str]:
    """bwrap arguments that put /dev/null over each daemon socket present. By real path: bwrap
    resolves a destination inside the new root and cannot create a mount point through the
    /var/run -> /run link ("Can't create file at /var/run/docker.sock"), and the same socket
    reached by two names is masked once."""
    seen: list[str] = []
    for s in SOCKETS:
        if os.path.exists(s):
            real = os.path.realpath(s)
            if real not in seen:
                seen.append(real)
    out: list[str] = []
    for real in seen:
        out += ["--ro-bind", "/dev/null", real]
    return out


def unavailable() -> str | None:
    """Why bubblewrap cannot sandbox here (None when it can). Probed once per process, with the
    same socket masks a real run uses, so `auto` never picks a sandbox that would not start."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bubblewrap (bwrap) is not installed (Debian: apt-get install bubblewrap)"
    if exe not in _probe:
        try:
            r = subprocess.run([exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *socket_masks(), "true"],
                               capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
            _probe[exe] = None if r.returncode == 0 else f"bwrap does not run here: {r.stderr.strip()[-200:]}"
        except (OSError, subprocess.TimeoutExpired) as e:
            _probe[exe] = f"bwrap does not run here: {e}"
    return _probe[exe]


def resolve(mode: str, where: str = "loop.sandbox") -> tuple[str, str | None]:
    """(effective mode "bwrap" | "none", a warning to show once or None). `bwrap` that cannot
    run is an invalid policy for this machine (exit 65)."""
    if mode == "none":
        return "none", None
    why = unavailable()
    if why is None:
        return "bwrap", None
    if mode == "bwrap":
        raise InvalidInput(f"{where}: bwrap: {why}")
    warn = None
    if why not in _warned:
        _warned.add(why)
        warn = f"healer: warning: {where}: auto: {why}; the agent runs unsandboxed (writes outside its worktree are reported)"
    return "none", warn


def _git(cwd: Path, *args: str) -> str:
    from healer import git

    return git.run(cwd, *args, check=False).stdout


@dataclass(frozen=True)
class GitPaths:
    git_dir: Path
    common: Path
    branch_ref: str | None  # refs/heads/... the worktree's HEAD points at


def git_paths(workdir: Path) -> GitPaths | None:
    out = _git(workdir, "rev-parse", "--path-format=absolute", "--git-dir", "--git-common-dir").split("\n")
    if len(out) < 2 or not out[0]:
        return None
    ref = _git(workdir, "symbolic-ref", "-q", "HEAD") or None
    return GitPaths(Path(out[0]), Path(out[1]), ref)


@dataclass
class Profile:
    """What a sandboxed program may write: `rw` binds, then `ro` re-mounted read-only on top."""
    workdir: Path
    rw: list[Path] = field(default_factory=list)
    ro: list[Path] = field(default_factory=list)
    rw_last: list[Path] = field(default_factory=list)  # writable inside a read-only folder (the branch's ref folder)
    network: bool = True
    tmpdir: Path | None = None

    def wrap(self, argv: list[str]) -> list[str]:
        exe = shutil.which("bwrap") or "bwrap"
        a = [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        if not self.network:
            a.append("--unshare-net")
        for p in self.rw:
            a += ["--bind", str(p), str(p)]
        for p in self.ro:
            a += ["--ro-bind", str(p), str(p)]
        for p in self.rw_last:
            a += ["--bind", str(p), str(p)]
        a += socket_masks()
        if self.tmpdir is not None:
            t = str(self.tmpdir)
            a += ["--tmpfs", t, "--setenv", "TMPDIR", t, "--setenv", "TMP", t, "--setenv", "TEMP", t]
        a += ["--chdir", str(self.workdir), "--", *argv]
        return a


def _mk(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def loop_profile(workdir: Path, writable: list[str], network: bool) -> Profile:
    """The loop's agent and gates: the worktree, its branch in git, a private temp dir, `writable`."""
    workdir = workdir.resolve()
    prof = Profile(workdir=workdir, network=network)
    prof.rw.append(workdir)
    own = workdir / ".healer"
    own.mkdir(exist_ok=True)
    prof.ro.append(own)
    if (workdir / ".git").is_file():  # a linked worktree's pointer to its git dir
        prof.ro.append(workdir / ".git")
    gp = git_paths(workdir)
    if gp is not None:
        cd, gd = gp.common, gp.git_dir
        rw_git: list[Path] = [_mk(cd / "objects")]
        ro_git: list[Path] = []
        if gd != cd:
            # a linked worktree: its admin folder holds its index, HEAD and logs/HEAD
            rw_git.append(gd)
            ro_git += [gd / n for n in ("commondir", "gitdir", "config.worktree") if (gd / n).exists()]
        else:
            # the main checkout: index.lock is created in .git itself, so .git is writable and
            # everything that governs git is put back read-only on top of it
            rw_git.append(cd)
            for n in ("hooks", "info", "refs", "logs"):
                ro_git.append(_mk(cd / n))
            ro_git += [cd / n for n in ("config", "config.worktree", "packed-refs", "worktrees", "modules")
                       if (cd / n).exists()]
            (cd / "logs" / "HEAD").touch(exist_ok=True)
        branch_rw: list[Path] = []
        if gp.branch_ref and gp.branch_ref.startswith("refs/heads/"):
            branch_rw += [_mk((cd / gp.branch_ref).parent), _mk((cd / "logs" / gp.branch_ref).parent)]
        if gd == cd:
            branch_rw.append(cd / "logs" / "HEAD")
        prof.rw += rw_git
        prof.ro += ro_git
        prof.rw_last += branch_rw
    for w in writable:
        p = Path(os.path.expanduser(w)).resolve()
        p.mkdir(parents=True, exist_ok=True)
        prof.rw.append(p)
    return prof


@dataclass
class Session:
    """One sandboxed run's private temp dir: a tmpfs mounted over `WORKTREE/.healer/tmp` (an empty
    folder of healer's own, so a SIGKILLed runner leaves nothing in the system temp folder)."""
    profile: Profile

    def __enter__(self) -> Profile:
        t = self.profile.workdir / ".healer" / "tmp"
        t.mkdir(parents=True, exist_ok=True)
        self.profile.tmpdir = t
        return self.profile

    def __exit__(self, *exc) -> None:
        self.profile.tmpdir = None
