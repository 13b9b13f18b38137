"""Sandboxes for the programs healer runs on an agent's behalf (the loop's agent and gates).

bubblewrap (Debian package `bubblewrap`, the mechanism Claude Code's sandbox uses on Linux):
the agent sees the machine read-only (`--ro-bind / /`, a fresh /dev and /proc), with these
writable: its worktree (healer's own `.healer/` in it stays read-only), what git needs to
commit on the worktree's own branch (the run's own object folder, adopted by healer/loop/objects.py
with every id checked, never the repository's store; the branch's ref folder and reflog, the
worktree's admin folder), a private temp dir (a tmpfs, $TMPDIR), and the paths the policy
lists. The repository's hooks, config, info/ and other refs stay read-only. Network is
optional (`--unshare-net`, with an allow-list of host:port relayed in); no Unix socket can be made
(a seccomp filter): healer/netbox.py. The Docker socket is masked. Every capability is dropped, for a root
caller too (bwrap keeps a root caller's unless told, and with them the agent could unmount all of
this). Enforced by the kernel's mount namespaces, not by a promise the agent is asked to keep.

`container`: the same writable set bind-mounted into a Docker container of the offline
`healer-python` image (an empty root, the host's /usr, Python and healer mounted read-only, /etc
and $HOME read-only), a read-only root, every capability dropped, a private /tmp tmpfs, no network
unless `sandbox_network: true`, the host's uid:gid so files keep their owner. One container per
program (the agent, each gate); the loop's deadline stops it and it is always removed.

`auto` uses bubblewrap when it works on this machine (probed once per process), else runs
unconfined and warns once; `none` runs unconfined (the loop then reports the writes it can
see outside the worktree, see healer/loop/guard.py).

A sandbox that fails to start its program must never look like a program that ran: each run
is settled (`Launch.settle`) from what the sandbox itself reports. bubblewrap writes
`{"child-pid": N}` on `--json-status-fd` right after clone(), BEFORE it sets the mounts up
(a failed mount still shows a child-pid), and `{"exit-code": N}` only when the program it
exec'd has exited: no exit-code, bwrap not killed, means bwrap failed (its one `bwrap: ...`
line says why). Docker: a container that never started (State.StartedAt unset) or was never
created. Either is `SandboxFailed` (exit 69); a program that does not exist inside is exit 127,
as unsandboxed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

from healer import digest, endpoints, git, netbox, procs
from healer.containers.run import init_argv, signal_exit
from healer.errors import InvalidInput, Unavailable
from healer.policy.cache import cache_dir
from healer.procs import ANCESTORS, MARKER, which

MODES = ("auto", "bwrap", "container", "none")
CONTAINER_LABEL = "healer.kind"
CONTAINER_KIND = "loop-sandbox"
WORKDIR_LABEL = "healer.loop.workdir"
_probe: dict[str, str | None] = {}
_warned: set[str] = set()
SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock")


def _which(cmd: str) -> str | None:
    return which(cmd)


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


_probing: dict[str, subprocess.Popen] = {}


# a user namespace of its own (where the kernel allows one): the sandbox's root then has capabilities only
# there (an empty bounding set), its mounts are locked beneath it, and it may not make another one
USERNS = ["--unshare-user", "--disable-userns"]
# a pid namespace and a fresh /proc of its own, tied to bwrap's life: the agent sees no process but its own
# (no /proc/PID/root or cwd magic link to the host's or a neighbour's mount namespace, no runner to signal),
# and when bwrap dies the kernel kills the namespace's init and with it every process inside, whatever forked
PIDNS = ["--unshare-pid", "--proc", "/proc", "--die-with-parent"]
_userns: dict[str, bool] = {}  # bwrap path -> whether USERNS passed the probe here


def _probe_argv(exe: str, userns: bool = True) -> list[str]:
    return [exe, "--cap-drop", "ALL", *(USERNS if userns else []), "--ro-bind", "/", "/", "--dev", "/dev", *PIDNS,
            *socket_masks(), "--json-status-fd", "1", "true"]


_KNOBS = ("/proc/sys/kernel/unprivileged_userns_clone", "/proc/sys/user/max_user_namespaces",
          "/proc/sys/user/max_mnt_namespaces", "/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
PROBE_FILE = "bwrap-probe"


def _probe_key(exe: str) -> str | None:
    """What a probe that passed depends on: this bwrap (its file), this boot of this kernel, the user, the
    settings that allow namespaces, the sockets to mask. None when one of them cannot be read."""
    try:
        real = os.path.realpath(exe)
        st = os.stat(real)
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        return None
    knobs: list[str | None] = []
    for k in _KNOBS:
        try:
            with open(k) as f:
                knobs.append(f.read().strip())
        except OSError:
            knobs.append(None)
    parts = [real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, os.getuid(), os.uname().release,
             boot, knobs, _probe_argv("bwrap")[1:]]  # what the probe asked of it (its options and masks)
    return digest.sha256(json.dumps(parts).encode()).hexdigest()


def _probe_path() -> Path:
    return cache_dir() / PROBE_FILE


def _remembered(exe: str) -> bool:
    """The probe passed before with everything it depends on unchanged (healer's cache folder, which the
    sandbox keeps read-only): bubblewrap works, without a process to prove it again. Only a pass is ever
    remembered, so the cache can only make healer sandbox; a sandbox that then fails to start forgets it.
    The second line says whether it passed with a user namespace of its own (USERNS)."""
    key = _probe_key(exe)
    if key is None:
        return False
    try:
        lines = _probe_path().read_text().split("\n")
    except (OSError, UnicodeDecodeError):
        return False
    if lines[0].strip() != key:
        return False
    _userns[exe] = len(lines) > 1 and lines[1].strip() == "userns"
    return True


def _remember(exe: str) -> None:
    key = _probe_key(exe)
    if key is None:
        return
    p = _probe_path()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f"{p.name}.{os.getpid()}.tmp")
        tmp.write_text(key + "\n" + ("userns" if _userns.get(exe) else "plain") + "\n")
        os.replace(tmp, p)
    except OSError:
        pass


def forget_probe() -> None:
    """A bwrap that failed to start a program: the next process probes again."""
    try:
        _probe_path().unlink(missing_ok=True)
    except OSError:
        pass
    _probe.clear()


def probe_early() -> None:
    """Start the probe now and let `unavailable()` collect it: `healer loop run` starts it before
    its first git calls, so the probe's namespace set-up overlaps them instead of adding to them.
    A probe remembered from an earlier process (`_remembered`) starts nothing."""
    exe = _which("bwrap")
    if exe is None or exe in _probe or exe in _probing:
        return
    if _remembered(exe):
        _probe[exe] = None
        return
    try:
        _probing[exe] = subprocess.Popen(_probe_argv(exe), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                         stdin=subprocess.DEVNULL)
    except OSError:
        pass  # `unavailable()` probes again and words the error


def unavailable() -> str | None:
    """Why bubblewrap cannot sandbox here (None when it can). Probed once per process, with the
    same socket masks a real run uses, so `auto` never picks a sandbox that would not start."""
    exe = _which("bwrap")
    if exe is None:
        return "bubblewrap (bwrap) is not installed (Debian: apt-get install bubblewrap)"
    if exe not in _probe and exe not in _probing and _remembered(exe):
        _probe[exe] = None
    if exe not in _probe:
        try:
            proc = _probing.pop(exe, None) or subprocess.Popen(
                _probe_argv(exe), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
            try:
                _out, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise
            _userns[exe] = proc.returncode == 0
            if proc.returncode != 0:  # no user namespace allowed here (a setuid bwrap, a kernel that refuses): without
                proc = subprocess.Popen(_probe_argv(exe, userns=False), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
                _out, err = proc.communicate(timeout=30)
            _probe[exe] = None if proc.returncode == 0 else f"bwrap does not run here: {err.strip()[-200:]}"
            if proc.returncode == 0:
                _remember(exe)
        except (OSError, subprocess.TimeoutExpired) as e:
            _probe[exe] = f"bwrap does not run here: {e}"
    return _probe[exe]


def resolve(mode: str, where: str = "loop.sandbox", image: str = "healer-python") -> tuple[str, str | None]:
    """(effective mode "bwrap" | "container" | "none", a warning to show once or None). `bwrap`
    that cannot run is an invalid policy for this machine (exit 65); `container` without a
    Docker engine that answers is an unavailable service (exit 69)."""
    if mode == "none":
        return "none", None
    if mode == "container":
        container_ready(image, where)
        return "container", None
    why = unavailable()
    if why is None:
        miss = netbox.unix_filter_missing()  # an arch without the seccomp filter: Unix sockets stay open
        if miss and miss not in _warned:
            _warned.add(miss)
            return "bwrap", f"healer: warning: {where}: {miss}"
        return "bwrap", None
    if mode == "bwrap":
        raise InvalidInput(f"{where}: bwrap: {why}")
    warn = None
    if why not in _warned:
        _warned.add(why)
        warn = f"healer: warning: {where}: auto: {why}; the agent runs unsandboxed (writes outside its worktree are reported)"
    return "none", warn


def container_ready(image: str, where: str = "loop.sandbox") -> None:
    """The docker CLI, an engine that answers and the image (healer's own is built offline on demand)."""
    if _which("docker") is None:
        raise Unavailable(f"{where}: container: the docker command is not installed (Debian: apt-get install docker.io)")
    from healer.containers import images  # lazy: pulls docker: 77 ms of `loop run`'s start

    try:
        client = _docker()
    except Unavailable as e:
        raise Unavailable(f"{where}: container: {e}") from None
    images.ensure(client, image)


class SandboxFailed(Unavailable):
    """The sandbox did not start the program: exit 69 (an environment healer needs is broken),
    never an iteration of an agent that did not run."""

    def __init__(self, mode: str, what: str, detail: str) -> None:
        self.mode, self.what, self.detail = mode, what, detail
        line = " ".join(detail.split())[:300] or "no message"
        super().__init__(f"sandbox {mode} failed to start {what}: {line}")


def _tail(path: Path, n: int = 8192) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _git(cwd: Path, *args: str) -> str:
    return git.run(cwd, *args, check=False).stdout


_PLAIN_BRANCH = re.compile(r"refs/heads/[A-Za-z0-9._/-]+")


@dataclass(frozen=True)
class GitPaths:
    git_dir: Path
    common: Path
    branch_ref: str | None  # refs/heads/... the worktree's HEAD points at


def git_paths(workdir: Path) -> GitPaths | None:
    lay = git.layout(workdir)
    if lay is None:
        return None
    try:  # the plain HEAD file says it without a git process; anything unusual asks git
        head = (lay.git_dir / "HEAD").read_text()
    except OSError:
        head = ""
    ref = head[5:-1] if head.startswith("ref: ") and head.endswith("\n") else ""
    if _PLAIN_BRANCH.fullmatch(ref) and ".." not in ref and "//" not in ref and not ref.endswith((".lock", "/")):
        return GitPaths(lay.git_dir, lay.common, ref)
    symbolic = _git(workdir, "symbolic-ref", "-q", "HEAD") or None
    return GitPaths(lay.git_dir, lay.common, symbolic)


@dataclass
class Profile:
    """What a sandboxed program may write: `rw` binds, then `ro` re-mounted read-only on top."""
    workdir: Path
    rw: list[Path] = field(default_factory=list)
    ro: list[Path] = field(default_factory=list)
    rw_last: list[Path] = field(default_factory=list)  # writable inside a read-only folder (the branch's ref folder)
    network: bool = True
    tmpdir: Path | None = None
    kind: str = "bwrap"  # or "container"
    image: str = "healer-python"
    pid_namespace: bool = True  # bwrap PIDNS (a container always has its own); see `wants_pidns`
    env: dict[str, str] = field(default_factory=dict)  # set inside, whatever the caller's environment says
    allow: list[tuple[str, int]] = field(default_factory=list)  # host:port reachable with network off (healer/netbox.py)
    unix_sockets: bool = False  # bwrap: socket(AF_UNIX) allowed (else refused by seccomp, healer/netbox.py)
    over: list[tuple[Path, Path]] = field(default_factory=list)  # (source, destination) bound read-only last: a gate
    #   file as the base has it, over the tree's (healer/gating.py)

    def launch(self, argv: list[str], env: dict[str, str] | None = None, what: str = "the program") -> Launch:
        if self.kind == "container":
            return ContainerLaunch(self, argv, env or {}, what)
        return BwrapLaunch(self, argv, what)

    def wrap(self, argv: list[str], status_fd: int | None = None, net=None) -> list[str]:
        exe = _which("bwrap") or "bwrap"
        # a root caller's bwrap keeps every capability unless told: the agent could then unmount the
        # read-only binds, remount / writable and trace the runner (tests/security: privileged)
        a = [exe, "--cap-drop", "ALL"]
        if _userns.get(exe):
            a += USERNS
        a += ["--ro-bind", "/", "/", "--dev", "/dev"]
        if self.pid_namespace:
            a += PIDNS
        # without a pid namespace a fresh /proc would show the same processes, writable: the host's
        # stays, read-only like the rest of / (an opt-out for a non-root runner only: `wants_pidns`)
        if status_fd is not None:
            a += ["--json-status-fd", str(status_fd)]
        if not self.network:
            a.append("--unshare-net")
        for p in self.rw:
            a += ["--bind", str(p), str(p)]
        for p in self.ro:
            a += ["--ro-bind", str(p), str(p)]
        for p in self.rw_last:
            a += ["--bind", str(p), str(p)]
        for src, dst in self.over:
            a += ["--ro-bind", str(src), str(dst)]
        a += socket_masks()
        if net is not None:  # healer/netbox.py: the seccomp filter, the allow-list's /etc/hosts and init
            a += net.args
            argv = [*net.prefix, *argv]
        for k, v in self.env.items():
            a += ["--setenv", k, v]
        if self.tmpdir is not None:
            t = str(self.tmpdir)
            a += ["--tmpfs", t, "--setenv", "TMPDIR", t, "--setenv", "TMP", t, "--setenv", "TEMP", t]
        a += ["--chdir", str(self.workdir), "--", *argv]
        return a


class Launch:
    """One program run in the sandbox: `argv` to spawn with `pass_fds` kept open, then `settle()`
    the result from what the sandbox reports, then `close()`."""

    argv: list[str]
    pass_fds: tuple[int, ...] = ()
    env: dict[str, str] | None = None  # for the spawned process; None: the caller's
    mode = "bwrap"

    def __init__(self, what: str) -> None:
        self.what = what

    def settle(self, res, log: Path):
        return res

    def close(self) -> None:
        pass

    def __enter__(self) -> Launch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class BwrapLaunch(Launch):
    mode = "bwrap"

    def __init__(self, profile: Profile, argv: list[str], what: str) -> None:
        super().__init__(what)

        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        self.net = netbox.Plumbing(profile.network, profile.allow, profile.unix_sockets)
        self.argv = profile.wrap(argv, status_fd=self._w, net=self.net)
        self.pass_fds = (self._w, *self.net.pass_fds)

    def status(self) -> list[dict]:
        """The JSON documents bwrap wrote (it has exited: they are all in the pipe)."""
        buf = b""
        while True:
            try:
                chunk = os.read(self._r, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            buf += chunk
        docs = []
        for line in buf.decode("utf-8", "replace").splitlines():
            with contextlib.suppress(ValueError):
                d = json.loads(line)
                if isinstance(d, dict):
                    docs.append(d)
        return docs

    def settle(self, res, log: Path):
        if self._w >= 0:
            os.close(self._w)
            self._w = -1
        ran = any("exit-code" in d for d in self.status())
        why = self.net.check() if ran else None
        if why:  # the allow-list's init did not start the program: the sandbox failed, not the program
            raise SandboxFailed("bwrap", self.what, why)
        if ran or res.timed_out or res.stopped or res.exit_code is None or res.exit_code < 0:
            return res  # the program ran and ended, or bwrap was killed (the deadline, a stop, the agent itself)
        text = _tail(log)
        said = [ln for ln in text.splitlines() if ln.startswith("bwrap: ")]
        if said and said[-1].startswith("bwrap: execvp "):
            return replace(res, exit_code=127)  # the program does not exist (yet): a failure of it, as unsandboxed
        raise SandboxFailed("bwrap", self.what, (said[-1] if said else text.strip()[-300:]) or f"bwrap exited {res.exit_code}")

    def close(self) -> None:
        self.net.close()
        for fd in (self._r, self._w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._r = self._w = -1


def _mount(src: Path | str, dst: Path | str, ro: bool) -> list[str]:
    import csv  # lazy: csv: 1.4 ms of `loop run`'s start; the container mode only

    row = ["type=bind", f"source={src}", f"target={dst}"] + (["readonly"] if ro else [])
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(row)  # docker parses --mount as CSV: a comma in a path is quoted
    return ["--mount", out.getvalue()]


_NEVER_STARTED = "0001-01-01T00:00:00Z"
_KEEP_OUT = ("DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY")


class ContainerLaunch(Launch):
    """`docker run` of the program in a fresh container, named so the loop can settle and remove it
    whatever happened to the docker client (killed at the deadline with the rest of the tree)."""

    mode = "container"

    def __init__(self, profile: Profile, argv: list[str], env: dict[str, str], what: str) -> None:
        super().__init__(what)
        from healer.containers import images  # lazy: pulls docker: 73 ms of `loop run`'s start

        self.name = f"healer-loop-{os.urandom(8).hex()}"  # no `import uuid` on the loop's path
        mounts: dict[str, tuple[str, bool]] = {}  # target -> (source, read-only); later entries win
        for host_path, spec in images.python_mounts().items():
            mounts[host_path] = (host_path, spec.get("mode") == "ro")
        for extra in ("/etc", os.path.expanduser("~")):
            if extra not in ("/", "") and os.path.isdir(extra):
                mounts.setdefault(os.path.realpath(extra), (os.path.realpath(extra), True))
        for p in profile.rw:
            mounts[str(p)] = (str(p), False)
        for p in profile.ro:
            mounts[str(p)] = (str(p), True)
        for p in profile.rw_last:
            mounts[str(p)] = (str(p), False)
        for src, dst in profile.over:
            mounts[str(dst)] = (str(src), True)
        tmp = str(profile.tmpdir) if profile.tmpdir is not None else "/tmp"
        a = ["docker", "run", "-i", "--name", self.name, "--label", f"{CONTAINER_LABEL}={CONTAINER_KIND}",
             "--label", f"{WORKDIR_LABEL}={profile.workdir}",
             "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--pids-limit", "4096",
             "--user", f"{os.getuid()}:{os.getgid()}", "--network", "host" if profile.network else "none",
             "--tmpfs", "/tmp:exec", "--workdir", str(profile.workdir)]
        if tmp != "/tmp":
            a += ["--tmpfs", f"{tmp}:exec"]
        for target in sorted(mounts, key=lambda t: (t.count("/"), t)):
            source, ro = mounts[target]
            a += _mount(source, target, ro)
        # values travel in the docker client's own environment (`-e NAME`), never on its command line
        # the tree's marker too (set by procs.spawn on the client): the loop's tree kill, and a resumed
        # run's kill of a dead runner's leftovers, find the container's processes by it
        self.env = {**env, **profile.env, "TMPDIR": tmp, "TMP": tmp, "TEMP": tmp}
        for k in sorted({*self.env, MARKER, ANCESTORS}):
            if k not in _KEEP_OUT and "=" not in k:
                a += ["-e", k]
        self.argv = [*a, profile.image, *init_argv(argv)]

    def settle(self, res, log: Path):
        import docker.errors  # lazy: pulls docker: 71 ms of `loop run`'s start

        try:
            client = _docker()
            state = client.api.inspect_container(self.name).get("State") or {}
        except docker.errors.NotFound:
            state = None
        except Exception as e:  # noqa: BLE001 - the engine went away under the run: the sandbox failed
            _client.clear()
            raise SandboxFailed("container", self.what, f"the Docker engine: {type(e).__name__}: {e}") from None
        if res.timed_out or res.stopped:
            return res
        if state is None:  # never created: the client says why (an invalid mount, no image, ...)
            raise SandboxFailed("container", self.what, _docker_said(_tail(log)) or f"docker exited {res.exit_code}")
        if state.get("StartedAt", _NEVER_STARTED).startswith("0001-"):
            err = state.get("Error") or _docker_said(_tail(log))
            if "exec:" in err and ("no such file or directory" in err or "executable file not found" in err):
                return replace(res, exit_code=127)
            raise SandboxFailed("container", self.what, err or "the container never started")
        code = signal_exit(state.get("ExitCode"))
        return replace(res, exit_code=code)

    def close(self) -> None:
        remove_container(self.name)


_client: list = []


def _docker():
    """One docker client per process (a ping per program run would add to every iteration)."""
    if not _client:
        from healer.containers.client import connect  # lazy: pulls docker: 84 ms of `loop run`'s start

        _client.append(connect())
    return _client[0]


def _docker_said(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.startswith("docker: ") or "Error response from daemon" in ln]
    return lines[-1] if lines else ""


def remove_leftovers(workdir: Path) -> list[str]:
    """Containers of a runner that was SIGKILLed in this worktree (the loop holds the worktree's lock,
    so every loop container labelled with it is a leftover). Returns their names."""
    try:
        client = _docker()
        found = client.api.containers(all=True, filters={"label": [f"{CONTAINER_LABEL}={CONTAINER_KIND}",
                                                                   f"{WORKDIR_LABEL}={Path(workdir).resolve()}"]})
    except Exception:  # noqa: BLE001 - no engine: nothing of ours can be running in it
        return []
    names = [(c.get("Names") or ["?"])[0].lstrip("/") for c in found]
    for n in names:
        remove_container(n)
    return names


def remove_container(name: str) -> None:
    """Stop (SIGKILL) and remove a loop container; gone already is fine."""
    with contextlib.suppress(Exception):
        import docker.errors  # lazy: pulls docker: 76 ms of `loop run`'s start

        with contextlib.suppress(docker.errors.NotFound):
            _docker().api.remove_container(name, force=True)


def _inside(p: Path, top: Path) -> bool:
    try:
        p.resolve().relative_to(top)
        return True
    except ValueError:
        return False


def _mk(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def wants_pidns(asked: bool) -> bool:
    """Whether bwrap gets PIDNS. Always for a root runner: without it, as root, a sandboxed program reaches the
    host's mount namespace through /proc/<bwrap's pid>/root (a magic link a read-only /proc does not stop) and a
    neighbour's worktree through /proc/PID/cwd. `loop.sandbox_pid_namespace: false` is honoured for another
    user only (tests/security/test_containment.py)."""
    return asked or os.geteuid() == 0


def loop_profile(workdir: Path, writable: list[str], network: bool | None, kind: str = "bwrap",
                 image: str = "healer-python", gp: GitPaths | None = None,
                 pid_namespace: bool = True, objects: Path | None = None,
                 allow: list[tuple[str, int]] | None = None, unix_sockets: bool = False) -> Profile:
    """The loop's agent and gates: the worktree, its branch in git, a private temp dir, `writable`.
    `network` None: off (network_on). `gp`: the worktree's git paths
    when the caller already knows them (the loop asks once per run: its guard puts back any change
    to HEAD, so the branch cannot move under it). `objects`: the run's own object folder, where the
    programs' git writes (healer/loop/objects.py); the repository's `objects/` is then read-only.
    `allow`: the host:port endpoints reachable with network off (healer/netbox.py; an allow-list turns a
    null `network` off); `unix_sockets`: bwrap lets the programs make Unix sockets."""
    workdir = workdir.resolve()
    network = network_on(network, kind, allow)
    prof = Profile(workdir=workdir, network=network, kind=kind, image=image,
                   pid_namespace=wants_pidns(pid_namespace), allow=list(allow or []), unix_sockets=unix_sockets)
    prof.rw.append(workdir)
    own = workdir / ".healer"
    own.mkdir(exist_ok=True)
    prof.ro.append(own)
    if (workdir / ".git").is_file():  # a linked worktree's pointer to its git dir
        prof.ro.append(workdir / ".git")
    gp = gp or git_paths(workdir)
    if gp is not None:
        cd, gd = gp.common, gp.git_dir
        store = _mk(cd / "objects")
        rw_git: list[Path] = [] if objects is not None else [store]
        ro_git: list[Path] = []
        if gd != cd:
            # a linked worktree: its admin folder holds its index, HEAD and logs/HEAD
            rw_git.append(gd)
            ro_git += [gd / n for n in ("commondir", "gitdir", "config.worktree") if (gd / n).exists()]
        else:
            # the main checkout: index.lock is created in .git itself, so .git is writable and
            # everything that governs git is put back read-only on top of it
            rw_git.append(cd)
            if _inside(cd, workdir):
                rw_git = []  # writable already as part of the worktree: no mount of its own (each costs a start)
            for n in ("hooks", "info", "refs", "logs"):
                ro_git.append(_mk(cd / n))
            ro_git += [cd / n for n in ("config", "config.worktree", "packed-refs", "worktrees", "modules")
                       if (cd / n).exists()]
            if objects is not None:
                ro_git.append(store)
            (cd / "logs" / "HEAD").touch(exist_ok=True)
        branch_rw: list[Path] = []
        if gp.branch_ref and gp.branch_ref.startswith("refs/heads/"):
            branch_rw += [_mk((cd / gp.branch_ref).parent), _mk((cd / "logs" / gp.branch_ref).parent)]
        if gd == cd:
            branch_rw.append(cd / "logs" / "HEAD")
        prof.rw += rw_git
        prof.ro += ro_git
        prof.rw_last += branch_rw
        if objects is not None:
            prof.rw_last.append(_mk(objects))
            prof.env.update(git.private_objects_env(objects.resolve(), store.resolve()))
    _add_writable(prof, writable)
    return prof


def network_on(network: bool | None, kind: str, allow: list[tuple[str, int]] | None) -> bool:
    """Network on or off: null is off in every mode (issue 39: on, an agent reached the store's PostgreSQL and
    healer's metrics on the host's 127.0.0.1); what the programs may reach is the allow-list's, and on is true."""
    if network is None:
        network = False
    if allow and not network:
        if kind == "container":
            raise InvalidInput("loop.sandbox_network_allow: the container sandbox has no allow-list (bwrap has): "
                               "use loop.sandbox: bwrap, or sandbox_network: true")
    return network


def _writable_path(w: str) -> Path:
    """A `sandbox_writable` entry made ready to bind: a file (~/.claude.json) is bound as the file; a missing path
    is made a folder, or an empty file when its name has a suffix and no trailing slash (`~/.claude.json`)."""
    p = Path(os.path.expanduser(w)).resolve()
    if not p.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
        if Path(w).suffix and not w.endswith("/"):
            p.touch()
        else:
            p.mkdir()
    return p


def _add_writable(prof: Profile, writable: list[str]) -> None:
    for w in writable:
        prof.rw.append(_writable_path(w))
    # healer's cache of validated policies (healer/policy/cache.py) stays read-only, even when
    # the policy makes ~/.cache writable: an agent must not hand the next run a weaker policy
    c = cache_dir().resolve()
    if any(c == w or w in c.parents for w in prof.rw):
        c.mkdir(parents=True, exist_ok=True)
        prof.ro.append(c)


def gate_profile(checkout: Path, loop_policy, kind: str, tmpdir: Path) -> Profile:
    """The fleet's merge and main gates, in healer's scratch checkout of the agent's merged code: a test
    suite imports that code, so it runs as confined as the loop's gates. Writable: the checkout, a private
    tmpfs (`tmpdir`, a folder of healer's own outside the checkout, so nothing the agent committed there
    decides where it goes) and `loop.sandbox_writable`. Everything else read-only: the fleet's git (no object,
    ref or admin file of a checkout healer itself merges with), its `.healer/` store and the rest of the
    machine."""
    checkout = checkout.resolve()
    tmpdir.mkdir(parents=True, exist_ok=True)

    allow = endpoints.parse_allow(loop_policy.sandbox_network_allow)
    prof = Profile(workdir=checkout, network=network_on(loop_policy.sandbox_network, kind, allow), kind=kind,
                   image=loop_policy.sandbox_image, pid_namespace=wants_pidns(loop_policy.sandbox_pid_namespace),
                   tmpdir=tmpdir.resolve(), allow=allow, unix_sockets=loop_policy.sandbox_unix_sockets)
    prof.rw.append(checkout)
    if (checkout / ".git").is_file() and not (checkout / ".git").is_symlink():
        prof.ro.append(checkout / ".git")
    _add_writable(prof, loop_policy.sandbox_writable)
    return prof


def run(profile: Profile | None, argv: list[str], log: Path, what: str, **kw):
    """procs.run, in `profile`'s sandbox when there is one (None: unconfined). `log` is where the program's
    stderr went (bwrap's own `bwrap: ...` line is read back from it). A sandbox that did not start the
    program raises SandboxFailed, never a result of a program that did not run. `drain` (kw): called once the
    program has ended, before `log` is read (a capture thread's last bytes written)."""
    drain = kw.pop("drain", None) or (lambda: None)
    if profile is None:
        try:
            return procs.run(argv, **kw)
        finally:
            drain()
    argv = procs.resolve_python(argv, os.environ.get("PATH"))
    env = dict(kw.get("env") or procs.environ())
    for attempt in range(1, MOUNT_RACE_TRIES + 1):
        try:
            with profile.launch(argv, env, what) as launch:
                if launch.env is not None:
                    kw["env"] = launch.env
                try:
                    res = procs.run(launch.argv, pass_fds=launch.pass_fds, **kw)
                finally:
                    drain()
                return launch.settle(res, log)
        except SandboxFailed as e:
            if attempt == MOUNT_RACE_TRIES or not mount_race(e):
                raise
    raise AssertionError("unreachable")  # pragma: no cover


MOUNT_RACE_TRIES = 3


def mount_race(e: SandboxFailed) -> bool:
    """bwrap could not re-apply read-only to a mount that appeared or went away while it copied the host's mount
    table (Docker setting up or tearing down a container's overlay, `.../overlay2/<id>-init/merged`): the program
    never started, and the next try meets a settled table. Any other failure is the environment's, said at once."""
    return e.mode == "bwrap" and "Unable to apply mount flags" in e.detail and "Invalid argument" in e.detail


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
