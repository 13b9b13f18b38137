"""Run a list of gates (argv + timeout) in a folder, cheapest first, stop at the first failure.

Exit codes decide, and for a pytest gate its report, with the gate's files as the base has them
(healer/gating.py, the same rules as the loop's gates). A gate that cannot decide (timed out, cannot start) makes the
result `unknown`; the caller chooses whether unknown blocks (a merge) or lets pass
(main's status, fail-open).

The gates run the agent's merged code (a test suite imports it), so they run under the loop's sandbox
(`loop.sandbox`, healer/sandbox.py `gate_profile`): the scratch checkout and a private temp folder
writable, the fleet's git and store read-only. A sandbox that cannot be had, or that fails to start a
gate, is `unknown` (never a pass of a gate that did not run).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from healer import conventions as cv
from healer import environ, errors, git, procs, sandbox
from healer.clock import Clock, system
from healer.loop import tap

PASS = "pass"
FAIL = "fail"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class GateResult:
    outcome: str  # pass | fail | unknown
    failed: str | None  # name of the gate that failed or could not decide
    log: str

    def tail(self, n: int) -> str:
        return "\n".join(self.log.splitlines()[-n:])


@dataclass(frozen=True)
class Confinement:
    profile: sandbox.Profile | None  # None: unconfined (loop.sandbox none, or auto without bwrap)
    note: str | None = None  # said first in the gate log (a warning, or why no gate could run)
    refused: bool = False  # the sandbox the policy asks for is not there: no gate runs


@contextlib.contextmanager
def confined(root: Path, checkout: Path, loop_policy) -> Iterator[Confinement]:
    """The sandbox the merge or main gates of `checkout` run in, with its private temp folder
    (.healer/scratch-tmp/<name>: an empty folder a tmpfs covers while a gate runs, removed after)."""
    try:
        mode, warn = sandbox.resolve(loop_policy.sandbox, image=loop_policy.sandbox_image)
    except (errors.InvalidInput, errors.Unavailable) as e:
        yield Confinement(None, f"gates not run: {e}", refused=True)
        return
    if mode == "none":
        yield Confinement(None, warn)
        return
    tmp = cv.scratch_tmp(root, checkout.name)
    try:
        yield Confinement(sandbox.gate_profile(checkout, loop_policy, mode, tmp), warn)
    finally:
        with contextlib.suppress(OSError):
            tmp.rmdir()  # empty on the host: what the gates wrote went to the tmpfs over it


def gate_checkout(root: Path, checkout: Path, gates, loop_policy, clock: Clock | None = None, *,
                  base: str | None = None) -> GateResult:
    """The fleet's gates (merge or main) on healer's scratch `checkout`, confined like the loop's. `base`: the
    commit whose gate files are the operator's (main before the merge; main itself for main's gates): every gate
    is prepared and judged by healer/gating.py, in a folder of healer's own beside the scratch temp folders."""
    own = cv.scratch_tmp(root, checkout.name + ".gates")
    try:
        with confined(root, checkout, loop_policy) as box:
            return run_gates(gates, checkout, grace=loop_policy.kill_grace, clock=clock, confinement=box,
                             env_pass=loop_policy.env_pass, base=base, own=own,
                             protected_paths=list(loop_policy.protected_paths), gate_config=list(loop_policy.gate_config),
                             output_cap=loop_policy.output_cap)
    finally:
        shutil.rmtree(own, ignore_errors=True)  # healer's own copies and reports, read already


def run_gates(gates, cwd: str | Path, *, grace: float = 5.0, clock: Clock | None = None,
              confinement: Confinement | None = None, env_pass: list[str] | None = None, base: str | None = None,
              own: Path | None = None, protected_paths: list[str] | None = None,
              gate_config: list[str] | None = None, output_cap: int | None = None) -> GateResult:
    """`output_cap`: bytes kept of each gate's output, head and tail (healer/loop/tap.py; the agent's code runs
    in a merge gate: a flood of it must not sit whole in the dispatcher's memory or log)."""
    from healer import gating  # lazy: pulls healer.loop (protect, gatecheck): 70-390 ms of the daemons' start

    clock = clock or system()
    profile = confinement.profile if confinement is not None else None
    env = environ.for_programs(procs.environ(), env_pass)
    parts: list[str] = [confinement.note] if confinement is not None and confinement.note else []
    if confinement is not None and confinement.refused:
        return GateResult(UNKNOWN, gates[0].name if gates else None, "\n".join(parts))
    own = own if own is not None else Path(cwd) / ".healer" / "gates"
    for i, g in enumerate(gates, 1):
        parts.append(f"$ {' '.join(g.run)}  # gate {g.name}")
        try:
            prep = gating.prepare(list(g.run), Path(cwd), base if base is not None else git.rev(cwd), list(protected_paths or []),
                                  own / f"gate-{i}", env, report=getattr(g, "report", "auto"), extra_files=gate_config,
                                  name=g.name)
        except (git.GitError, OSError) as e:
            parts.append(f"gate {g.name}: not run: cannot read the base's gate files: {e}")
            return GateResult(UNKNOWN, g.name, "\n".join(parts))
        if prep.report is not None:
            parts.append(f"healer: {prep.note}")
        if prep.refused:
            parts.append(prep.refused)
            return GateResult(FAIL, g.name, "\n".join(parts))
        with tempfile.TemporaryFile(mode="w+b", buffering=0) as out:
            cap = tap.Tap(out, None, clock.monotonic, cap=output_cap, name="gate-output").start()
            try:
                # the unnamed file by its /proc name: the sandbox reads its own error line back from it
                done = sandbox.run(gating.confine(profile, prep), prep.argv, Path(f"/proc/self/fd/{out.fileno()}"),
                                   f"gate {g.name}", cwd=cwd, timeout=g.timeout, grace=grace, clock=clock,
                                   stdout=cap.writer, stderr=cap.writer, env=prep.env, drain=cap.sync)
            except sandbox.SandboxFailed as e:
                sandbox.forget_probe()
                parts.append(f"gate {g.name}: {e}")
                return GateResult(UNKNOWN, g.name, "\n".join(parts))
            except OSError as e:
                parts.append(f"gate {g.name}: cannot start: {e}")
                return GateResult(UNKNOWN, g.name, "\n".join(parts))
            finally:
                cap.finish()
            out.seek(0)
            text = out.read().decode(errors="replace").rstrip()
        if text:
            parts.append(text)
        if done.timed_out or done.exit_code is None:
            parts.append(f"gate {g.name}: no verdict within {g.timeout:.0f}s (killed)")
            return GateResult(UNKNOWN, g.name, "\n".join(parts))
        parts.append(f"gate {g.name}: exit {done.exit_code}")
        ok, why = gating.judge(prep, Path(cwd), done.exit_code)
        if prep.report is not None or ok != (done.exit_code == 0):
            parts.append(f"healer: gate {g.name}: {why}")
        if not ok:
            return GateResult(FAIL, g.name, "\n".join(parts))
    return GateResult(PASS, None, "\n".join(parts))
