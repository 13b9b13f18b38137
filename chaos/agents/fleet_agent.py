"""A scripted stand-in for `healer loop run`, launched by the dispatcher through `fleet.loop_command`.

It takes the loop's flags (--policy --task --workdir --root --run-id [--resume RUN_ID]),
does one fixed thing in the worktree, writes the loop's result file
(`WORKDIR/.healer/runs/RUN_ID/result.json`) and exits with the loop's exit codes.

Behaviours (the outcome names of chaos/agents/behaviours.py):
  success  commit a change, exit 0          noop    exit 0 without a commit
  fail     exit 1 with a failure signature  broken  commit a file named BROKEN, exit 0
  die      SIGKILL itself                    hang    wait (bounded by --hang-max), killable
  stall    exit 3 (stalled)                  budget  exit 2 (budget exhausted)
  diskfull exit 74 (the host took no more writes: a full disk)
`die` and `hang` commit first when given --commit (or the behaviour is `die+commit`).

$HEALER_FLEET_SCRIPTS/$HEALER_TICKET (a file a game-day fault wrote: same_commit_repush, broken_proposal)
overrides the task file's behaviour from the next run on.
$HEALER_FLEET_DELAY (seconds) makes every run take that long before it acts (killable:
restart storms need agents caught mid-flight). The behaviour comes from --behaviour, else $HEALER_FLEET_BEHAVIOUR, else a line
`behaviour: NAME[,NAME...]` in the task file (the Nth run in this worktree takes
the Nth name, the last one repeating), else `success`.
Deliberately free of healer imports: it starts fast and is a separate program.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

GIT_ID = {"GIT_AUTHOR_NAME": "fleet-agent", "GIT_AUTHOR_EMAIL": "agent@healer.invalid",
          "GIT_COMMITTER_NAME": "fleet-agent", "GIT_COMMITTER_EMAIL": "agent@healer.invalid"}


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ID}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


def scripted() -> str | None:
    """A game-day fault's script for this ticket ($HEALER_FLEET_SCRIPTS/$HEALER_TICKET): it wins over the task."""
    folder, ticket = os.environ.get("HEALER_FLEET_SCRIPTS"), os.environ.get("HEALER_TICKET")
    if not folder or not ticket:
        return None
    try:
        text = (Path(folder) / ticket).read_text().strip()
    except OSError:
        return None
    return text or None


def behaviour_for(args, workdir: Path, n: int) -> str:
    if args.behaviour:
        names = args.behaviour
    elif scripted():
        names = scripted() or "success"
        n = 0  # a script plays from its first name on
    elif os.environ.get("HEALER_FLEET_BEHAVIOUR"):
        names = os.environ["HEALER_FLEET_BEHAVIOUR"]
    else:
        names = "success"
        try:
            m = re.search(r"^behaviou?r:\s*(\S+)", Path(args.task).read_text(), re.M)
            if m:
                names = m.group(1)
        except OSError:
            pass
    seq = [x for x in names.split(",") if x]
    return seq[min(n, len(seq) - 1)]


def commit(workdir: Path, run_id: str, name: str | None = None, text: str | None = None) -> str:
    work = workdir / "work"
    work.mkdir(exist_ok=True)
    n = len(list(work.glob("*.txt"))) + 1
    f = workdir / name if name else work / f"{run_id}-{n}.txt"
    f.write_text(text or f"change {n} by run {run_id}\n")
    git(workdir, "add", "-A", str(f.relative_to(workdir)))
    # with the run's trailer, as `healer loop run` commits: the fleet merges nothing else
    git(workdir, "commit", "-q", "-m", f"agent {run_id}: step {n}\n\nHealer-Run: {run_id}")
    return git(workdir, "rev-parse", "HEAD")


def runs_so_far(workdir: Path) -> int:
    """How many runs this worktree saw: its counter, else (a counter an older agent truncated on a full
    disk) the run folders, each run's own."""
    counter = workdir / ".healer" / "fleet_agent.runs"
    try:
        return int(counter.read_text())
    except FileNotFoundError:
        return 0
    except (OSError, ValueError):
        return sum(1 for _ in (workdir / ".healer" / "runs").glob("*/started"))


def count_run(workdir: Path, n: int) -> None:
    """Written aside then renamed: on a full disk the counter keeps its last value instead of being
    truncated (every later run would then fail: a ticket lost to the fixture, not to healer)."""
    counter = workdir / ".healer" / "fleet_agent.runs"
    tmp = counter.with_name(f"{counter.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(str(n))
        tmp.replace(counter)
    finally:
        tmp.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fleet_agent")
    ap.add_argument("--policy")
    ap.add_argument("--task", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--root")
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--resume")
    ap.add_argument("--behaviour")
    ap.add_argument("--commit", action="store_true")
    ap.add_argument("--hang-max", type=float, default=120.0)
    ap.add_argument("--think", type=float, default=0.0, help="seconds to 'think' before acting (a run that lasts)")
    args = ap.parse_args(argv)

    workdir = Path(args.workdir)
    run_dir = workdir / ".healer" / "runs" / args.run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    n = runs_so_far(workdir)
    count_run(workdir, n + 1)
    what = behaviour_for(args, workdir, n)
    with_commit = args.commit or what.endswith("+commit")
    what = what.split("+")[0]
    (run_dir / "started").write_text(f"{os.getpid()} {what}\n")
    print(f"fleet_agent: run {args.run_id} (#{n + 1}) behaviour={what} resume={args.resume}", flush=True)
    threading.Event().wait(args.think)

    def result(code: int, reason: str, signature: str | None = None, gate_log: list[str] | None = None) -> int:
        head = git(workdir, "rev-parse", "HEAD")
        data = {"run_id": args.run_id, "exit_code": code, "reason": reason, "iterations": 1,
                "failure_signature": signature, "state_hash": head[:16], "head": head,
                "gate_log_tail": gate_log or [], "cost_usd": 0.0, "committed": what in ("success", "broken")}
        tmp = run_dir / "result.json.tmp"
        tmp.write_text(json.dumps(data))
        tmp.replace(run_dir / "result.json")
        return code

    delay = float(os.environ.get("HEALER_FLEET_DELAY") or 0)
    if delay > 0:
        threading.Event().wait(delay)
    if what == "success":
        commit(workdir, args.run_id)
        return result(0, "gates passed")
    if what == "broken":
        commit(workdir, args.run_id, "BROKEN", f"broken by {args.run_id}\n")
        return result(0, "gates passed (locally)")
    if what == "noop":
        return result(0, "nothing to do")
    if what == "fail":
        lines = [f"gate tests: FAILED test_feature (run {args.run_id})", "AssertionError: expected 42, got 41", "gate tests: exit 1"]
        print("\n".join(lines), flush=True)
        return result(1, "gate failed", "tests:AssertionError:expected-42", lines)
    if what == "stall":
        return result(3, "stalled: same failure 3 times", "tests:AssertionError:expected-42")
    if what == "budget":
        return result(2, "iteration cap reached", "tests:AssertionError:expected-42")
    if what == "diskfull":  # what `healer loop run` answers when the disk takes no more writes
        return result(74, "the host took no more writes (scripted)")
    if what in ("die", "hang"):
        if with_commit:
            commit(workdir, args.run_id)
        (run_dir / f"ready.{os.getpid()}").write_text("ready\n")  # per process: a resume reuses the run folder
        if what == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        threading.Event().wait(args.hang_max)  # killable; bounded so a forgotten agent cannot outlive a test run
        return result(4, "hang ended")
    print(f"fleet_agent: unknown behaviour {what!r}", file=sys.stderr)
    return 64


def run() -> int:
    """main(), answering a full disk as `healer loop run` does: one `healer:` line and exit 74 (the dispatcher
    counts that against no budget, healer/core/endings.py), not a traceback and exit 1."""
    try:
        return main()
    except (OSError, subprocess.CalledProcessError) as e:
        text = f"{e} {getattr(e, 'stderr', '') or ''}"
        if getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT, errno.EROFS) or "No space left on device" in text:
            print(f"healer: the host took no more writes: {' '.join(text.split())[:300]}", file=sys.stderr)
            return 74
        raise


if __name__ == "__main__":
    sys.exit(run())
