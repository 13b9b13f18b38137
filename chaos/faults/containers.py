"""Container faults for game days: kill, pause/unpause, stop, restart through the Docker SDK.

Targets are chosen by exact name, by label (`key` or `key=value`, several are ANDed),
then, when `count` is given, a seeded random pick of at most `count` of them: the blast
radius. `dry_run=True` returns the targets and acts on nothing. Every outcome records the
container's state read through the SDK before and after the action.

A pause must never outlive its game day. Before any container is paused, an undo
(unpause) is appended to a file-backed journal (`UndoJournal`, an fsync'd JSONL file);
`replay()` runs every undo not yet marked done, and `cleanup(fleet)` also unpauses every
paused container labelled for that fleet. With `guard=True`, a small watchdog process in
its own session (`python -m chaos.faults.containers guard JOURNAL PID`) waits for the
game-day process to die, by any means including SIGKILL, and then replays the journal.
"""

from __future__ import annotations

import fcntl
import fnmatch
import json
import os
import random
import signal as _signal
import subprocess
import sys
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from healer import procs
from healer.clock import Clock, system
from healer.containers.client import connect
from healer.errors import HealerError, UsageError

LABEL_FLEET = "healer.fleet"

# which states each action can act on (others are skipped, not errors)
_ACTS_ON = {
    "kill": ("running", "paused"),
    "pause": ("running",),
    "unpause": ("paused",),
    "stop": ("running", "paused", "restarting"),
    "restart": ("running", "paused", "exited", "created"),
    "list": None,
}


@dataclass(frozen=True)
class Target:
    id: str
    name: str
    state: str
    labels: dict


@dataclass(frozen=True)
class Outcome:
    action: str
    id: str
    name: str
    before: str
    after: str
    dry_run: bool = False
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _client(client):
    if client is not None:
        return client
    return connect()


def parse_labels(label: str | Sequence[str] | None) -> list[str]:
    if not label:
        return []
    items = [label] if isinstance(label, str) else list(label)
    out = []
    for item in items:
        for part in str(item).split(","):
            part = part.strip()
            if part:
                out.append(part)
    return out


def parse_signal(sig: str | int) -> int:
    if isinstance(sig, int):
        return sig
    s = str(sig).strip().upper()
    if s.isdigit():
        return int(s)
    name = s if s.startswith("SIG") else f"SIG{s}"
    try:
        return int(_signal.Signals[name])
    except KeyError:
        raise UsageError(f"--signal: expected a signal name or number (KILL, TERM, 9...), got {sig!r}") from None


def select(*, name: str | Sequence[str] | None = None, label: str | Sequence[str] | None = None,
           count: int | None = None, seed: int | None = None, states: Iterable[str] | None = None,
           client=None, ticket: str | None = None) -> list[Target]:
    """The containers an action will hit. Name or label is required: a fault never
    chooses among every container on the host."""
    names = [name] if isinstance(name, str) else list(name or [])
    labels = parse_labels(label)
    if not names and not labels:
        raise UsageError("container faults: give a --name or a --label (e.g. healer.fleet=/path/to/fleet)")
    if count is not None and count < 0:
        raise UsageError(f"--count: expected a number >= 0, got {count}")
    client = _client(client)
    filters: dict[str, list[str]] = {}
    if labels:
        filters["label"] = labels
    found = client.containers.list(all=True, filters=filters)
    if names:
        wanted = {n.lstrip("/") for n in names}
        found = [c for c in found if c.name in wanted or c.id in wanted or c.id[:12] in wanted]
    if ticket:  # a glob over the healer.ticket label (scenarios aim faults at tickets)
        found = [c for c in found if fnmatch.fnmatchcase((c.labels or {}).get("healer.ticket", ""), ticket)]
    allowed = set(states) if states is not None else None
    targets = [Target(c.id, c.name, c.status, dict(c.labels or {})) for c in found if allowed is None or c.status in allowed]
    return pick(targets, count, seed)


def pick(targets: Sequence[Target], count: int | None, seed: int | None) -> list[Target]:
    """The blast radius: at most `count` of `targets`, the same ones for the same seed."""
    ordered = sorted(targets, key=lambda t: (t.name, t.id))
    if count is None or len(ordered) <= count:
        return ordered
    return sorted(random.Random(seed).sample(ordered, count), key=lambda t: (t.name, t.id))


# --- the undo journal -------------------------------------------------------------------------

def default_journal_path(fleet_root: str | Path | None = None) -> Path:
    if fleet_root is not None:
        return Path(fleet_root) / ".healer" / "chaos-undo.jsonl"
    env = os.environ.get("HEALER_CHAOS_JOURNAL")
    if env:
        return Path(env)
    return Path(os.environ.get("TMPDIR", "/tmp")) / f"healer-chaos-undo-{os.getuid()}.jsonl"


class UndoJournal:
    """Append-only JSONL: {"id", "op", "container", "name", "fleet"} to register, {"id", "done"} to close.
    Registered before the fault acts, so a crash between the two leaves an undo, never a lost pause."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _append(self, rec: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(rec, sort_keys=True) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def register(self, op: str, container: str, name: str = "", fleet: str | None = None) -> str:
        uid = uuid.uuid4().hex
        self._append({"id": uid, "op": op, "container": container, "name": name, "fleet": fleet, "pid": os.getpid()})
        return uid

    def done(self, uid: str) -> None:
        self._append({"id": uid, "done": True})

    def pending(self) -> list[dict]:
        if not self.path.exists():
            return []
        recs: dict[str, dict] = {}
        closed: set[str] = set()
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line from a crash mid-append
            if r.get("done"):
                closed.add(r.get("id"))
            elif r.get("id"):
                recs[r["id"]] = r
        return [r for uid, r in recs.items() if uid not in closed]

    def replay(self, client=None) -> list[Outcome]:
        """Run every pending undo; an undo whose container is gone or no longer paused is done too."""
        import docker.errors  # lazy: docker SDK, 55 ms (-X importtime) on `gameday list` (load_all)

        out = []
        todo = self.pending()
        if not todo:
            return out
        client = _client(client)
        for r in todo:
            if r.get("op") != "unpause":
                continue
            try:
                c = client.containers.get(r["container"])
                before = c.status
                if before == "paused":
                    c.unpause()
                    c.reload()
                out.append(Outcome("unpause", c.id, c.name, before, c.status))
            except docker.errors.NotFound:
                out.append(Outcome("unpause", r["container"], r.get("name", ""), "gone", "gone"))
            except docker.errors.APIError as e:
                out.append(Outcome("unpause", r["container"], r.get("name", ""), "?", "?", error=str(e)))
                continue  # stays pending: the next replay tries again
            self.done(r["id"])
        return out


def unpause_one(container: str, client=None) -> str:
    """Undo of one pause (also applied by chaos/faults/undo.py for kind `unpause_container`)."""
    import docker.errors  # lazy: docker SDK, 55 ms, as above

    try:
        c = _client(client).containers.get(container)
        if c.status != "paused":
            return f"container {c.name} not paused ({c.status})"
        c.unpause()
        return f"unpaused container {c.name}"
    except docker.errors.NotFound:
        return f"container {container[:12]} already gone"


class Journal(Protocol):
    """Any journal with the game-day undo journal's `register` (chaos/faults/undo.py's UndoJournal)."""

    def register(self, kind: str, **data: Any) -> int: ...


def _journal(journal, default: Path):
    """Ours (a path or an UndoJournal), or any object with the game-day journal's `register(kind, **data)`."""
    if journal is None:
        return UndoJournal(default)
    if isinstance(journal, (str, Path)):
        return UndoJournal(journal)
    return journal


def _register_unpause(journal, c, fleet: str | None) -> None:
    if isinstance(journal, UndoJournal):
        journal.register("unpause", c.id, c.name, fleet)
    else:  # the game-day engine's journal (chaos/faults/undo.py)
        journal.register("unpause_container", container=c.id, name=c.name, fleet=fleet)


# --- actions -----------------------------------------------------------------------------------

def _act(action: str, fn, *, name, label, count, seed, dry_run, client, store=None, ticket=None) -> list[Outcome]:
    import docker.errors  # lazy: docker SDK, 55 ms, as above

    client = _client(client)
    targets = select(name=name, label=label, count=count, seed=seed, states=_ACTS_ON[action], client=client, ticket=ticket)
    outcomes = []
    for t in targets:
        if dry_run:
            outcomes.append(Outcome(action, t.id, t.name, t.state, t.state, dry_run=True))
            continue
        err = None
        try:
            c = client.containers.get(t.id)
            before = c.status
            fn(c, t)
            c.reload()
            after = c.status
        except docker.errors.NotFound:
            before, after = t.state, "gone"
        except docker.errors.APIError as e:
            before, after, err = t.state, t.state, str(getattr(e, "explanation", None) or e)
        o = Outcome(action, t.id, t.name, before, after, error=err)
        outcomes.append(o)
        if store is not None:
            store.append(f"chaos.container.{action}", t.name, o.to_dict())
    return outcomes


def kill(signal: str | int = "SIGKILL", *, name=None, label=None, count=None, seed=None, dry_run=False,
         client=None, store=None) -> list[Outcome]:
    sig = parse_signal(signal)
    return _act("kill", lambda c, t: c.kill(signal=sig), name=name, label=label, count=count, seed=seed,
                dry_run=dry_run, client=client, store=store)


def pause(*, name=None, label=None, count=None, seed=None, dry_run=False, client=None, store=None,
          journal: Journal | UndoJournal | str | Path | None = None, guard: bool | int = False) -> list[Outcome]:
    """Pause the targets; an unpause is journaled before each. `guard=True` (or a pid) starts a
    watchdog that unpauses them when this process (or that pid) dies."""
    j = _journal(journal, default_journal_path())
    if guard and not dry_run and isinstance(j, UndoJournal):
        start_guard(j, os.getpid() if guard is True else int(guard))

    def do(c, t):
        _register_unpause(j, c, (t.labels or {}).get(LABEL_FLEET))
        c.pause()

    return _act("pause", do, name=name, label=label, count=count, seed=seed, dry_run=dry_run, client=client, store=store)


def unpause(*, name=None, label=None, count=None, seed=None, dry_run=False, client=None, store=None) -> list[Outcome]:
    return _act("unpause", lambda c, t: c.unpause(), name=name, label=label, count=count, seed=seed,
                dry_run=dry_run, client=client, store=store)


def stop(timeout: float = 10, *, name=None, label=None, count=None, seed=None, dry_run=False, client=None,
         store=None) -> list[Outcome]:
    def do(c, t):
        if c.status == "paused":
            c.unpause()  # a frozen init never sees the SIGTERM; the stop would always cost the full timeout
        c.stop(timeout=max(0, int(round(timeout))))

    return _act("stop", do, name=name, label=label, count=count, seed=seed, dry_run=dry_run, client=client, store=store)


def restart(timeout: float = 10, *, name=None, label=None, count=None, seed=None, dry_run=False, client=None,
            store=None) -> list[Outcome]:
    def do(c, t):
        if c.status == "paused":
            c.unpause()
        c.restart(timeout=max(0, int(round(timeout))))

    return _act("restart", do, name=name, label=label, count=count, seed=seed, dry_run=dry_run, client=client, store=store)


def listing(*, name=None, label=None, count=None, seed=None, client=None) -> list[Target]:
    return select(name=name, label=label, count=count, seed=seed, client=client)


def cleanup(fleet: str | None = None, *, journal: Journal | UndoJournal | str | Path | None = None, client=None) -> list[Outcome]:
    """End-of-game-day sweep: replay the journal, then unpause every paused container of the fleet."""
    client = _client(client)
    out = []
    if journal is not None or fleet is None:
        j = journal if isinstance(journal, UndoJournal) else UndoJournal(journal or default_journal_path())
        out.extend(j.replay(client))
    if fleet is not None:
        out.extend(unpause(label=f"{LABEL_FLEET}={fleet}", client=client))
    return out


def sweep(fleet: str, *, client=None) -> str:
    """The end of a game day on the container runtime (also `healer gameday clean` for a killed one):
    thaw the fleet's paused containers, then remove every container of that (temporary) fleet, as the
    game day's tree marker ends its processes. One line for the rollback report; never raises."""
    import docker.errors  # lazy: docker SDK, 55 ms, as above

    try:
        client = _client(client)
        thawed = cleanup(fleet, client=client)
        removed = 0
        for c in client.containers.list(all=True, filters={"label": f"{LABEL_FLEET}={fleet}"}):
            try:
                c.remove(force=True)
                removed += 1
            except docker.errors.NotFound:
                pass
        return f"unpaused {len(thawed)}, removed {removed} container(s) of fleet {fleet}"
    except (docker.errors.DockerException, HealerError, OSError) as e:
        return f"failed: containers of fleet {fleet}: {type(e).__name__}: {e}"


def inject(kind: str, *, fleet: str, target: str | None = None, count: int = 1, seed: int | None = None,
           params: dict | None = None, journal: Journal | UndoJournal | str | Path | None = None, guard: bool = True,
           dry_run: bool = False, client=None, store=None, name: str | Sequence[str] | None = None,
           label: str | Sequence[str] | None = None) -> list[Outcome]:
    """One scenario fault against a fleet's containers: `container_kill|pause|unpause|stop|restart`,
    `target` a ticket id or glob (default: any), `count` the blast radius, `params` `signal`/`timeout`.
    `name` / `label` narrow further (labels ANDed with the fleet's: never outside the fleet).
    A game-day engine calls this, and `cleanup(fleet, journal=...)` at its end."""
    params = dict(params or {})
    action = kind.removeprefix("container_")
    labels = [f"{LABEL_FLEET}={fleet}", *parse_labels(label)]
    common = dict(label=labels, count=count, seed=seed, dry_run=dry_run, client=client, store=store)
    ticket = target or None
    if action == "kill":
        sig = parse_signal(params.get("signal", "SIGKILL"))
        return _act("kill", lambda c, t: c.kill(signal=sig), name=name, ticket=ticket, **common)
    if action == "pause":
        j = _journal(journal, default_journal_path(fleet))
        if guard and not dry_run and isinstance(j, UndoJournal):
            start_guard(j, os.getpid())

        def do(c, t):
            _register_unpause(j, c, fleet)
            c.pause()

        return _act("pause", do, name=name, ticket=ticket, **common)
    if action == "unpause":
        return _act("unpause", lambda c, t: c.unpause(), name=name, ticket=ticket, **common)
    if action in ("stop", "restart"):
        timeout = max(0, int(round(float(params.get("timeout", 10)))))

        def do(c, t):
            if c.status == "paused":
                c.unpause()
            (c.stop if action == "stop" else c.restart)(timeout=timeout)

        return _act(action, do, name=name, ticket=ticket, **common)
    raise UsageError(f"container fault: expected container_kill|pause|unpause|stop|restart, got {kind!r}")


# --- the guard: unpause when the game day dies ------------------------------------------------

def _guard_file(journal: UndoJournal, pid: int) -> Path:
    return journal.path.with_name(f"{journal.path.name}.guard-{pid}")


def start_guard(journal: UndoJournal, pid: int) -> int:
    """Start (once per journal and pid) the watchdog that replays `journal` after `pid` dies."""
    marker = _guard_file(journal, pid)
    try:
        gpid = int(marker.read_text().strip())
        if procs.alive(gpid):
            return gpid
    except (OSError, ValueError):
        pass
    journal.path.parent.mkdir(parents=True, exist_ok=True)
    # spawned through a short-lived middle process, in its own session and without the tree
    # marker: killing the game day's whole process tree must not take its guard with it
    out = subprocess.run([sys.executable, "-m", "chaos.faults.containers", "spawn-guard", str(journal.path), str(pid)],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
                         env={k: v for k, v in os.environ.items() if k != "HEALER_TREE"})
    gpid = int(out.stdout.strip())
    marker.write_text(str(gpid))
    return gpid


def _spawn_guard(journal_path: str, pid: int) -> int:
    p = subprocess.Popen([sys.executable, "-m", "chaos.faults.containers", "guard", journal_path, str(pid)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, close_fds=True)
    print(p.pid, flush=True)
    return 0


def guard(journal_path: str, pid: int, clock: Clock | None = None, poll: float = 0.1) -> int:
    clock = clock or system()
    journal = UndoJournal(journal_path)
    while procs.alive(pid):
        clock.sleep(poll)
    for _ in range(50):  # the engine may be briefly busy; a pending undo must not be dropped
        try:
            journal.replay()
            if not journal.pending():
                break
        except Exception:  # noqa: BLE001 - keep trying until the deadline
            pass
        clock.sleep(0.2)
    try:
        _guard_file(journal, pid).unlink()
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "guard":
        sys.exit(guard(sys.argv[2], int(sys.argv[3])))
    if len(sys.argv) == 4 and sys.argv[1] == "spawn-guard":
        sys.exit(_spawn_guard(sys.argv[2], int(sys.argv[3])))
    sys.stderr.write("usage: python -m chaos.faults.containers guard JOURNAL PID\n")
    sys.exit(64)
