"""The fault undo journal: every fault writes how to undo it BEFORE it acts.

Each game day owns a run folder under the game-day home (`$HEALER_GAMEDAY_HOME`, default
`$TMPDIR/healer-gameday-$UID`) holding `owner.json` (pid and start time of the engine)
and `undo.jsonl` (one `register` line per fault, one `undone` line when rolled back).
At the end of a run every registered undo is applied, last first. If the engine itself
is SIGKILLed, the next `healer gameday run` (or `healer gameday clean`) finds run folders
whose owner is dead and applies what was left: SIGCONT a stopped pid, kill a process
tree the game day started, remove a lock file the fault created, move a worktree back.
Undo steps are idempotent and check identity (pid + create time) before signalling.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from chaos.faults.command import run_undo
from chaos.faults.containers import sweep, unpause_one
from healer import procs
from healer.clock import Clock, system

UNDO = "undo.jsonl"
OWNER = "owner.json"
UNCLAIMED_AGE = 3600.0  # an unclaimed work folder (older healer) counts as dead once untouched this long


def home() -> Path:
    p = _home_path()
    p.mkdir(parents=True, exist_ok=True)
    return p


def _same(pid: int, d: dict) -> bool:
    """Whether pid is still the process a record names: its `start` (procs.mark), or the wall-clock
    `create_time` an older healer wrote."""
    return procs.same(pid, d.get("pid_start", d.get("create_time")))


@dataclass
class Undo:
    id: int
    kind: str
    data: dict[str, Any]


class UndoJournal:
    failed = False  # an undo of this process's undo_all failed: the folder stays for `healer gameday clean`

    def __init__(self, folder: str | Path, clock: Clock | None = None, *, claim: bool = True) -> None:
        """`claim`: make the folder (if need be) and this process its owner, unless it has one. A dead run's
        journal is opened with claim=False: its folder stays the dead owner's, so `healer gameday clean` knows it."""
        self.folder = Path(folder)
        self.clock = clock or system()
        self.path = self.folder / UNDO
        if claim:
            self.folder.mkdir(parents=True, exist_ok=True)
        self._n = max((int(r.get("id", 0)) for r in self._lines()), default=0)
        owner = self.folder / OWNER
        if claim and not owner.exists():
            me = os.getpid()
            owner.write_text(json.dumps({"pid": me, "pid_start": procs.mark(me), "at": self.clock.now()}))

    def _lines(self) -> list[dict]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line torn by a kill mid-write: its fault never acted
        return out

    def _write(self, rec: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def register(self, kind: str, **data: Any) -> int:
        """Journal the undo of a fault about to be injected; returns its id."""
        self._n += 1
        self._write({"op": "register", "id": self._n, "kind": kind, "data": data, "at": self.clock.now()})
        return self._n

    def done(self, uid: int) -> None:
        self._write({"op": "undone", "id": uid, "at": self.clock.now()})

    def registered(self, kind: str) -> list[Undo]:
        """Every undo of `kind` ever journaled here, undone or not, oldest first."""
        return [Undo(r["id"], r["kind"], r.get("data", {})) for r in self._lines()
                if r.get("op") == "register" and r.get("kind") == kind]

    def pending(self) -> list[Undo]:
        regs: dict[int, Undo] = {}
        for r in self._lines():
            if r.get("op") == "register":
                regs[r["id"]] = Undo(r["id"], r["kind"], r.get("data", {}))
            elif r.get("op") == "undone":
                regs.pop(r["id"], None)
        return sorted(regs.values(), key=lambda u: -u.id)

    def finish(self) -> bool:
        """Remove this run's folder once nothing is left to undo (and the game-day home when no other run
        has one): a run that cleaned up after itself leaves nothing in the temp folder. A pending or a failed
        undo keeps it, for `healer gameday clean`. True when removed."""
        if self.failed or self.pending():
            return False
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.folder.parent == _home_path():  # a journal elsewhere (a caller's folder): its parent is not ours
            drop_home_if_empty(self.folder.parent)
        return True

    def undo_all(self) -> list[tuple[Undo, str]]:
        """Apply every pending undo, newest first. Returns (undo, what happened)."""
        out = []
        for u in self.pending():
            try:
                what = apply(u, self.clock)
            except OSError as e:
                what = f"failed: {e}"
            self.failed |= what.startswith("failed")
            self.done(u.id)
            out.append((u, what))
        return out


def apply(u: Undo, clock: Clock) -> str:
    d = u.data
    if u.kind == "sigcont":
        pid = int(d["pid"])
        if _same(pid, d):
            for p in [pid, *d.get("also", [])]:
                try:
                    os.kill(int(p), signal.SIGCONT)
                except (ProcessLookupError, PermissionError):
                    pass
            return f"SIGCONT {pid}"
        return f"pid {pid} already gone"
    if u.kind == "kill_tree":
        pid = int(d.get("pid") or 0)
        killed: list[int] = []
        if pid > 0 and _same(pid, d):  # pid 0 would signal our own process group
            killed = procs.ProcessTree(pid, d.get("marker")).kill(float(d.get("grace", 0.5)), clock)
        if d.get("marker"):
            killed += kill_marked(d["marker"])  # the root is gone: its escapees still carry the marker
        return f"killed {len(killed)} process(es) of {d.get('role', 'tree')} {pid}"
    if u.kind == "remove_file":
        p = Path(d["path"])
        if p.exists() and (d.get("content") is None or p.read_text(errors="replace") == d["content"]):
            p.unlink()
            return f"removed {p}"
        return f"{p} already gone"
    if u.kind == "move_back":
        src, dst = Path(d["src"]), Path(d["dst"])
        if dst.exists() and not src.exists():
            src.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(dst), str(src))
            return f"moved {dst} back to {src}"
        return f"{src} already in place"
    if u.kind == "kill_marker":  # the real engine: every process a game day started carries its marker
        killed = kill_marked(d["marker"])
        return f"killed {len(killed)} process(es) of {d.get('role', 'the game day')}"
    if u.kind == "command":  # a `command` fault's own undo argv (chaos/faults/command.py)
        return run_undo(d)
    if u.kind == "env":
        return "environment restored"  # in-process only; a dead engine took it with it
    if u.kind == "unpause_container":  # chaos/faults/containers.py pauses (issue 8)
        return unpause_one(d["container"])
    if u.kind == "containers_cleanup":  # a real game day on the container runtime: its fleet's containers end with it
        return sweep(d["fleet"])
    return f"unknown undo kind {u.kind!r}, skipped"


def marked(marker: str) -> list[psutil.Process]:
    out = []
    for pid in procs._marked_pids(marker):  # as HEALER_TREE, or inherited among HEALER_TREE_ANCESTORS
        try:
            out.append(psutil.Process(pid))  # a new object: signals checked against this process, never a kept one
        except psutil.Error:
            continue
    return out


def kill_marked(marker: str) -> list[int]:
    victims = marked(marker)
    for p in victims:
        try:
            p.send_signal(signal.SIGCONT)
            p.send_signal(signal.SIGKILL)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    psutil.wait_procs(victims, timeout=2)
    return [p.pid for p in victims]


def _owner_alive(folder: Path) -> bool:
    return live_owner(folder) is not None


def live_owner(folder: Path, name: str = OWNER) -> int | None:
    """The pid of the live process that claimed `folder` (its `name` file), or None (no claim, or its owner is dead)."""
    try:
        o = json.loads((folder / name).read_text())
        pid = int(o["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pid if _same(pid, o) else None


def _orphaned(base: Path, clock: Clock | None = None):
    """The undo journals of run folders whose owner is dead, opened without claiming them (claim=False: this
    process does not become their owner)."""
    for folder in sorted(p for p in base.iterdir() if p.is_dir()):
        if not (folder / UNDO).exists() or _owner_alive(folder):
            continue
        yield UndoJournal(folder, clock, claim=False)


def recover_leftovers(clock: Clock | None = None, base: Path | None = None) -> list[str]:
    """Undo what killed game days left behind (their owner is dead), then remove their run folders.
    Returns one line per undo."""
    out = []
    for j in list(_orphaned(base or home(), clock)):
        for u, what in j.undo_all():
            out.append(f"{j.folder.name}: {u.kind}: {what}")
        if not j.pending():
            shutil.rmtree(j.folder, ignore_errors=True)
    return out


def claim(folder: Path, name: str = OWNER) -> None:
    """Mark a run's work folder as owned by this process (pid + start time), like an undo journal's folder."""
    me = os.getpid()
    (Path(folder) / name).write_text(json.dumps({"pid": me, "pid_start": procs.mark(me)}))


def drop_home_if_empty(base: Path | None = None) -> None:
    b = base or _home_path()
    try:
        b.rmdir()  # only when empty: another run's folder keeps it
    except OSError:
        pass


def _home_path() -> Path:
    env = os.environ.get("HEALER_GAMEDAY_HOME")
    return Path(env) if env else Path(tempfile.gettempdir()) / f"healer-gameday-{os.getuid()}"


def clean(clock: Clock | None = None) -> list[str]:
    """`healer gameday clean`: undo and remove what dead runs left — their undo journals, their work folders
    (`$TMPDIR/gameday-<name>-*` whose owner is dead, or that no live run claims), stray files among them."""
    out: list[str] = []
    base = _home_path()
    if base.is_dir():
        out += recover_leftovers(clock, base)
        for entry in sorted(base.iterdir()):
            if entry.is_dir() and _owner_alive(entry):
                continue
            _remove(entry)
            out.append(f"removed {entry}")
        drop_home_if_empty(base)
    now = (clock or system()).now()
    for entry in sorted(Path(tempfile.gettempdir()).glob("gameday-*")):
        if not entry.is_dir() or entry.is_symlink() or _owner_alive(entry):
            continue
        if not (entry / OWNER).exists():
            # left by a version that did not claim its folders: a game day's fleet, untouched for an hour
            if not (entry / "fleet").is_dir() or now - entry.stat().st_mtime < UNCLAIMED_AGE:
                continue
        _remove(entry)
        out.append(f"removed {entry}")
    return out


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        try:
            p.unlink()
        except OSError:
            pass


def leftovers(base: Path | None = None) -> list[str]:
    """Pending undos of run folders whose owner is dead (what `recover_leftovers` would undo)."""
    return [f"{j.folder.name}: {u.kind} {u.data}" for j in _orphaned(base or home()) for u in j.pending()]
