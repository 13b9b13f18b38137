"""The process runtime: an agent loop is a local child process in its own session.

Status comes from the child's exit code when this process started it; for an agent
started by an earlier dispatcher (adopted after a restart) only the pid is known, so
an ended one is `gone` (its result file, if any, tells the rest). A recycled pid is
not mistaken for the agent: the process must carry the tree marker in its environment.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import psutil

from healer import procs
from healer.clock import Clock, system
from healer.fleet.exits import ExitWatch
from healer.fleet.runtime import EXITED, GONE, PAUSED, RUNNING, Handle, LaunchSpec, Status


class ProcessRuntime:
    kind = "process"

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or system()  # real time: grace periods are waited for real
        self._children: dict[int, tuple[subprocess.Popen, procs.ProcessTree]] = {}
        self._exits: ExitWatch | None = None  # an ExitWatch once someone asks to hear of exits (on_exit)

    def on_exit(self, callback) -> None:
        """Call `callback(pid)` as soon as any child launched from now on exits (the dispatcher's wake)."""
        self._exits = ExitWatch(callback)

    def launch(self, spec: LaunchSpec) -> Handle:
        out = None
        if spec.log_path:
            Path(spec.log_path).parent.mkdir(parents=True, exist_ok=True)
            out = open(spec.log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
        try:
            proc, tree = procs.spawn(spec.argv, cwd=spec.cwd, env={**_base_env(), **spec.env}, stdout=out,
                                     stderr=subprocess.STDOUT if out else None)
        finally:
            if out:
                out.close()
        self._children[proc.pid] = (proc, tree)
        if self._exits is not None:
            self._exits.watch(proc.pid)
        return Handle(kind=self.kind, pid=proc.pid, marker=tree.marker)

    def _ours(self, handle: Handle) -> tuple[subprocess.Popen, procs.ProcessTree] | None:
        return self._children.get(handle.pid or -1)

    def status(self, handle: Handle) -> Status:
        mine = self._ours(handle)
        if mine is not None:
            code = mine[0].poll()
            if code is not None:
                return Status(EXITED, code)
        elif not self._is_agent(handle):
            return Status(GONE)
        if procs.stopped(handle.pid):
            return Status(PAUSED)
        if mine is None and not procs.alive(handle.pid):
            return Status(GONE)
        return Status(RUNNING)

    def _is_agent(self, handle: Handle) -> bool:
        if not procs.alive(handle.pid):
            return False
        if not handle.marker:
            return True
        try:
            return psutil.Process(handle.pid).environ().get(procs.MARKER) == handle.marker
        except (psutil.AccessDenied, OSError):
            return True  # cannot tell: fail-open, treat as ours
        except psutil.NoSuchProcess:
            return False

    def stop(self, handle: Handle, grace: float) -> None:
        mine = self._ours(handle)
        if mine is None:
            if handle.pid:
                procs.ProcessTree(handle.pid, handle.marker).kill(grace, self.clock)
            return
        proc, tree = mine
        # Our own child is waited for through Popen first: ProcessTree.kill reaps with waitpid, after which
        # Popen would report exit 0 for a killed agent (and a killed agent must never look successful).
        tree.refresh()
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except OSError:
                proc.terminate()
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        tree.kill(min(grace, 1.0), self.clock)  # whatever it left behind, escapees included

    def wait(self, handle: Handle, timeout: float) -> Status:
        mine = self._ours(handle)
        if mine is not None:
            try:
                mine[0].wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
            return self.status(handle)
        try:
            psutil.Process(handle.pid).wait(timeout=timeout)
        except psutil.TimeoutExpired:
            pass
        except (psutil.NoSuchProcess, ValueError):
            pass
        return self.status(handle)

    def children(self) -> list[Handle]:
        """Handles of the children this runtime started and has not forgotten."""
        return [Handle(kind=self.kind, pid=pid, marker=t.marker) for pid, (_, t) in list(self._children.items())]

    def forget(self, handle: Handle) -> None:
        self._children.pop(handle.pid or -1, None)


def _base_env() -> dict[str, str]:
    return dict(os.environ)
