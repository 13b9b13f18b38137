"""ContainerRuntime: agent loops as Docker containers, behind the same port as processes.

Each agent runs in its own container of the offline `healer-python` image
(healer/containers/images.py): the worktree bind-mounted read-write at its own path, the
git directory it points to read-write (so the agent can commit), the host's Python,
site-packages and healer source read-only, labels naming the fleet, ticket and run.
Status and exit codes come from the engine through the SDK, so a container killed,
stopped, removed or paused looks to the supervisor exactly like a dead or stopped
process (SIGKILL -> exit 137 is reported as -9, like `Popen.returncode`).

The `docker` package is imported lazily: healer imports and runs without it.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path

import docker.errors

from healer.clock import Clock, system
from healer.containers import images
from healer.containers.client import connect
from healer.containers.run import init_argv, signal_exit
from healer.errors import HealerError
from healer.fleet.runtime import EXITED, GONE, PAUSED, RUNNING, UNKNOWN, Handle, LaunchSpec, Status

LABEL_FLEET = "healer.fleet"
LABEL_TICKET = "healer.ticket"
LABEL_RUN = "healer.run"
LABEL_KIND = "healer.kind"
LABEL_LOG = "healer.log"  # where the output goes, so any runtime instance (a restarted dispatcher) can copy it

# variables an agent loop needs from the host; the rest of the host environment stays out
_PASS_ENV = ("GIT_", "HEALER_")


def labels_for(labels: Mapping[str, str]) -> dict[str, str]:
    """`fleet`, `ticket`, `run` become `healer.fleet` ...; dotted keys pass unchanged."""
    out = {k if "." in k else f"healer.{k}": str(v) for k, v in labels.items()}
    out.setdefault(LABEL_KIND, "agent")
    return out


def _covered(path: str, volumes: Mapping[str, Mapping[str, str]]) -> bool:
    return any(path == m or path.startswith(m.rstrip("/") + "/") for m in volumes)


def _name_for(labels: Mapping[str, str]) -> str | None:
    ticket, run = labels.get(LABEL_TICKET), labels.get(LABEL_RUN)
    if not (ticket and run):
        return None
    name = re.sub(r"[^a-zA-Z0-9_.-]+", "-", f"healer-{ticket}-{run}").strip("-.")
    return name[:120] or None


def git_mounts(cwd: str) -> dict[str, dict[str, str]]:
    """A worktree's `.git` is a file pointing into the main repository's git dir; the agent
    commits there, so that git dir (the common one) is mounted read-write too."""
    dotgit = Path(cwd) / ".git"
    if not dotgit.is_file():
        return {}
    try:
        text = dotgit.read_text().strip()
    except OSError:
        return {}
    if not text.startswith("gitdir:"):
        return {}
    gitdir = Path(text.split(":", 1)[1].strip())
    if not gitdir.is_absolute():
        gitdir = (Path(cwd) / gitdir).resolve()
    common = gitdir
    cfile = gitdir / "commondir"
    if cfile.is_file():
        c = Path(cfile.read_text().strip())
        common = c if c.is_absolute() else (gitdir / c).resolve()
    return {str(common): {"bind": str(common), "mode": "rw"}}


def status_of(attrs: Mapping) -> Status:
    state = attrs.get("State") or {}
    s = state.get("Status")
    if s == "paused" or state.get("Paused"):
        return Status(PAUSED)
    if s in ("running", "restarting", "created"):
        return Status(RUNNING)
    if s == "exited":
        return Status(EXITED, signal_exit(state.get("ExitCode")))
    if s in ("dead", "removing"):
        return Status(GONE)
    return Status(UNKNOWN)


class ContainerRuntime:
    kind = "container"

    def __init__(self, image: str = "healer-python", *, network: str = "none", client=None, clock: Clock | None = None,
                 extra_mounts: Mapping[str, Mapping[str, str]] | None = None, build_image: bool = True,
                 poll: float = 0.05) -> None:
        if network not in ("none", "host"):
            raise HealerError(f"container runtime: network must be 'none' or 'host', got {network!r}")
        self.image = image
        self.network = network
        self.clock = clock or system()
        self.extra_mounts = dict(extra_mounts or {})
        self.build_image = build_image
        self.poll = poll
        self._client = client
        self._pumps: dict[str, threading.Thread] = {}
        self._logs: dict[str, str] = {}
        self._launched: dict[str, Handle] = {}
        self._flushed: set[str] = set()
        self._on_exit = None
        self._events: threading.Thread | None = None

    def on_exit(self, callback) -> None:
        """Call `callback(container_id)` when a container this runtime launched dies (Docker's event stream)."""
        self._on_exit = callback

    def _follow_events(self) -> None:
        """Docker `die` events for our containers wake the dispatcher; the tick stays the safety net if the stream drops."""
        real = system()
        while True:
            try:
                for ev in self.client.events(decode=True, filters={"type": "container", "event": ["die"],
                                                                    "label": [f"{LABEL_KIND}=agent"]}):
                    cid = ev.get("id") or (ev.get("Actor") or {}).get("ID")
                    if cid in self._launched and self._on_exit is not None:
                        self._on_exit(cid)
            except Exception:  # noqa: BLE001 - an engine restart or a dropped stream: reconnect; ticks still reap
                pass
            real.sleep(1.0)

    @classmethod
    def from_policy(cls, policy, clock: Clock | None = None, **kw) -> ContainerRuntime:
        fleet = policy.fleet
        return cls(image=fleet.image, network=getattr(fleet, "container_network", "none"), clock=clock, **kw)

    @property
    def client(self):
        if self._client is None:
            self._client = connect()
        return self._client

    # --- the port -------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> Handle:
        client = self.client
        if self.build_image:
            images.ensure(client, self.image)
        labels = labels_for(spec.labels)
        if spec.log_path:
            labels[LABEL_LOG] = str(Path(spec.log_path).resolve())
        cwd = str(Path(spec.cwd).resolve())
        volumes: dict[str, dict[str, str]] = dict(images.python_mounts())
        volumes.update(git_mounts(cwd))
        fleet_root = spec.env.get("HEALER_ROOT")
        if fleet_root and (Path(fleet_root) / ".healer").is_dir():
            # the loop reads its task and policy there and records its runs in the fleet's store
            state = str((Path(fleet_root) / ".healer").resolve())
            volumes[state] = {"bind": state, "mode": "rw"}
        volumes.update({k: dict(v) for k, v in self.extra_mounts.items()})
        volumes[cwd] = {"bind": cwd, "mode": "rw"}
        for arg in spec.argv:  # a file named on the command line (a policy, a task) must be readable inside
            if arg.startswith("/") and os.path.isfile(arg) and not _covered(arg, volumes):
                volumes[arg] = {"bind": arg, "mode": "ro"}
        if spec.log_path:
            # the log's folder is not mounted: the runtime copies the container's output there
            Path(spec.log_path).parent.mkdir(parents=True, exist_ok=True)
        env = {**images.python_path_env(), "HOME": "/tmp"}
        env.update({k: v for k, v in os.environ.items() if k.startswith(_PASS_ENV)})
        env.update(spec.env)
        env.pop("HEALER_TREE", None)  # the container is its own tree: the runtime, not a host marker, owns its life
        kwargs = dict(command=init_argv(spec.argv), detach=True, working_dir=cwd, volumes=volumes, labels=labels,
                      environment=env, network_mode=self.network, user=f"{os.getuid()}:{os.getgid()}",
                      stdin_open=False, tty=False)
        name = _name_for(labels)

        self._drop_ended(client, labels)

        try:
            container = client.containers.run(self.image, name=name, **kwargs)
        except docker.errors.APIError as e:
            if name and getattr(e, "status_code", None) == 409:  # name taken (a relaunch with the same run id)
                container = client.containers.run(self.image, **kwargs)
            else:
                if name:  # created but not started: do not leave it behind
                    try:
                        client.api.remove_container(name, force=True)
                    except docker.errors.APIError:
                        pass
                raise HealerError(f"container runtime: cannot start {list(spec.argv)[:3]} in {self.image}: {e.explanation or e}") from e
        if spec.log_path:
            self._start_pump(container, spec.log_path)
        handle = Handle(kind="container", container=container.id)
        self._launched[container.id] = handle
        if self._on_exit is not None and self._events is None:
            self._events = threading.Thread(target=self._follow_events, daemon=True, name="docker-events")
            self._events.start()
        return handle

    def status(self, handle: Handle) -> Status:
        if not handle.container:
            return Status(GONE)
        try:
            attrs = self.client.api.inspect_container(handle.container)
        except docker.errors.NotFound:
            return Status(GONE)
        except (docker.errors.DockerException, HealerError, OSError):
            return Status(UNKNOWN)  # fail-open: the engine did not answer, nobody is declared dead
        st = status_of(attrs)
        if st.state in (EXITED, GONE):
            self._flush_log(handle.container, (attrs.get("Config") or {}).get("Labels"))
        return st

    def stop(self, handle: Handle, grace: float) -> None:
        """SIGTERM the container's init, SIGKILL after `grace`: the PID namespace dies with it,
        so nothing the agent started survives. A paused container is thawed first (a frozen
        process never sees its SIGTERM)."""
        if not handle.container:
            return

        try:
            c = self.client.containers.get(handle.container)
        except docker.errors.NotFound:
            return
        try:
            if c.status == "paused":
                c.unpause()
            c.stop(timeout=max(0, int(round(grace))))
        except docker.errors.NotFound:
            return
        except docker.errors.APIError:
            try:
                c.kill()
            except docker.errors.APIError:
                pass
        self.wait(handle, timeout=max(grace, 0) + 10)

    def wait(self, handle: Handle, timeout: float) -> Status:
        deadline = self.clock.monotonic() + timeout
        while True:
            st = self.status(handle)
            if st.state not in (RUNNING, PAUSED, UNKNOWN) or self.clock.monotonic() >= deadline:
                return st
            self.clock.sleep(self.poll)

    # --- beyond the port ------------------------------------------------------------------

    def _drop_ended(self, client, labels: Mapping[str, str]) -> None:
        """Before a ticket's next run, remove its ended containers in this fleet: the store holds
        their exit already (a ticket is only relaunched once its last agent is no longer
        running), and an agent killed under the supervisor is never `forget`-ten by anyone."""
        fleet, ticket = labels.get(LABEL_FLEET), labels.get(LABEL_TICKET)
        if not (fleet and ticket):
            return

        try:
            old = client.containers.list(all=True, filters={"label": [f"{LABEL_FLEET}={fleet}", f"{LABEL_TICKET}={ticket}"],
                                                            "status": ["exited", "dead"]})
            for c in old:
                self._flush_log(c.id, c.labels)
                c.remove(force=True)
        except docker.errors.APIError:
            pass  # housekeeping only

    def children(self) -> list[Handle]:
        """Handles of the containers this runtime started and has not forgotten."""
        return list(self._launched.values())

    def forget(self, handle: Handle) -> None:
        """The dispatcher recorded the exit: copy the output to the log, then remove the
        container (a fleet running all night must not pile up dead containers)."""
        self._launched.pop(handle.container or "", None)
        if handle.container and self.status(handle).state in (EXITED, GONE):
            self.remove(handle)

    def remove(self, handle: Handle) -> None:
        """Forget an ended container (its output was copied to the log first)."""
        if not handle.container:
            return

        try:
            labels = (self.client.api.inspect_container(handle.container).get("Config") or {}).get("Labels")
            self._flush_log(handle.container, labels)
            self.client.api.remove_container(handle.container, force=True)
        except docker.errors.NotFound:
            pass

    def list(self, fleet: str | None = None, all: bool = True) -> list:
        filters = {"label": [f"{LABEL_FLEET}={fleet}"] if fleet else [LABEL_FLEET]}
        return self.client.containers.list(all=all, filters=filters)

    # --- logs: the container's output is copied to spec.log_path ---------------------------

    def _start_pump(self, container, log_path: str) -> None:
        self._logs[container.id] = log_path
        t = threading.Thread(target=self._pump, args=(container.id, log_path), daemon=True, name=f"logs-{container.id[:12]}")
        self._pumps[container.id] = t
        t.start()

    def _pump(self, cid: str, log_path: str) -> None:
        try:
            stream = self.client.api.logs(cid, stdout=True, stderr=True, stream=True, follow=True)
            with open(log_path, "ab") as f:
                for chunk in stream:
                    f.write(chunk)
                    f.flush()
        except Exception:  # noqa: BLE001 - the final copy in _flush_log is authoritative
            pass

    def _flush_log(self, cid: str, labels: Mapping[str, str] | None = None) -> None:
        """Copy an ended container's whole output to its log, once per runtime instance."""
        if cid in self._flushed:
            return
        path = self._logs.pop(cid, None) or (labels or {}).get(LABEL_LOG)
        if not path:
            return
        self._flushed.add(cid)
        t = self._pumps.pop(cid, None)
        if t is not None:
            t.join(timeout=2)
        try:
            data = self.client.api.logs(cid, stdout=True, stderr=True, stream=False)
        except Exception:  # noqa: BLE001 - keep what the pump wrote
            return
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
