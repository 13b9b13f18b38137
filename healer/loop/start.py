"""Start a governed loop from command-line values: shared by `healer loop run` (typer) and its fast path.

The fast path (`healer.launch`) handles the plain `healer loop run ...` that the dispatcher launches for
every ticket without importing typer, rich or the other commands: the CLI's own start-up is most of the
CPU a short loop costs. Anything it does not recognise (help, a typo) goes to the full CLI, which says why.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from healer import digest, git, sandbox
from healer.errors import InvalidInput, UsageError
from healer.loop import LoopRequest, run_loop
from healer.loop.state import RunPaths
from healer.policy.cache import MAX_BYTES
from healer.policy.cache import load as load_policy  # validated once per content, then remembered


def _fleet_root(root: Path | None) -> Path | None:
    r = root if root is not None else (Path(os.environ["HEALER_ROOT"]) if os.environ.get("HEALER_ROOT") else None)
    if r is None:
        return None
    r = r.resolve()
    if not (r / ".healer").is_dir():
        raise UsageError(f"--root {r}: not a healer fleet (no .healer/); run 'healer init' there or drop --root")
    return r


def _workdir(workdir: Path | None) -> Path:
    return (workdir or Path.cwd()).resolve()


def _read_task(task: Path) -> str:
    try:
        return task.read_text()
    except FileNotFoundError:
        raise InvalidInput(f"--task {task}: no such task file") from None
    except IsADirectoryError:
        raise InvalidInput(f"--task {task}: is a folder, expected a Markdown task file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInput(f"--task {task}: cannot read: {e}") from None


def committed_policy(wd: Path, path: Path) -> bytes:
    """The bytes of WORKDIR/healer.yaml when they are the committed HEAD's, else exit 65 (issue 39). Without
    `--policy` the loop reads the tree's healer.yaml, and an agent of an earlier run (killed before its loop put the
    file back) may have written it: only the operator's committed file is taken unasked; any other is taken only when
    named with `--policy`. Read once: the bytes compared are the bytes loaded."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise InvalidInput(f"{path}: cannot read: {e.strerror}") from None
    have = digest.sha1(b"blob %d\0" % len(raw) + raw).hexdigest()
    r = git.run(wd, "rev-parse", "-q", "--verify", "HEAD:./healer.yaml", check=False)
    if r.code != 0 or r.stdout.strip() != have:
        what = "is not committed" if r.code != 0 else "differs from the one committed at HEAD"
        raise InvalidInput(f"{path}: {what}, and without --policy the loop takes only the committed healer.yaml (an "
                           f"agent could have written this one); commit it, or pass --policy {path} to use it as it is")
    return raw


def start(*, policy: Path | None, task: Path | None, workdir: Path | None, agent: str | None, agent_cmd: str | None,
          argv_after: list[str], resume: str | None, run_id: str | None, root: Path | None, max_iterations: int | None,
          allow_dirty: bool) -> int:
    if agent_cmd and argv_after:
        raise UsageError("give the agent argv either with --agent-cmd or after `--`, not both")
    cmd = shlex.split(agent_cmd) if agent_cmd else (argv_after or None)
    if cmd is not None and agent and agent != "command":
        raise UsageError(f"--agent {agent} and an agent command exclude each other")
    if agent and agent not in ("command", "claude", "codex"):
        raise UsageError(f"--agent: expected command, claude or codex, got {agent!r}")
    if resume and run_id and resume != run_id:
        raise UsageError(f"--resume {resume} and --run-id {run_id} name different runs")
    wd = _workdir(workdir)
    pol_file, raw = policy, None
    if pol_file is None and not resume and (wd / "healer.yaml").exists():
        pol_file = wd / "healer.yaml"
        raw = committed_policy(wd, pol_file)
    pol = load_policy(pol_file, raw) if (pol_file is not None or not resume) else None
    if pol is None or pol.loop.sandbox in ("auto", "bwrap"):
        sandbox.probe_early()  # overlaps the runner's first git calls (collected when it resolves the mode)
    rid = resume or run_id
    is_resume = bool(resume)
    if is_resume and rid is not None and task is not None and not RunPaths(wd, rid).state.exists():  # (rid: --resume's)
        is_resume = False  # the runner died before its first persist: start this run afresh under the same id
        pol = pol or load_policy(None)
    if not is_resume and task is None:
        raise UsageError("--task: expected a task file (a new run needs one)")
    req = LoopRequest(
        workdir=wd, policy=pol, policy_file=str(pol_file) if pol_file else None,
        task=_read_task(task) if task is not None else None, task_file=str(task.resolve()) if task is not None else None,
        preset=agent, agent_cmd=cmd, run_id=rid, resume=is_resume, fleet_root=_fleet_root(root),
        max_iterations=max_iterations, allow_dirty=allow_dirty, subreaper=True, handle_signals=True,
    )
    return run_loop(req).exit_code


_VALUED = {"--policy": "policy", "-p": "policy", "--task": "task", "-t": "task", "--workdir": "workdir", "-w": "workdir",
           "--agent": "agent", "--agent-cmd": "agent_cmd", "--resume": "resume", "--run-id": "run_id", "--root": "root",
           "--max-iterations": "max_iterations"}
_PATHS = ("policy", "task", "workdir", "root")


def parse(argv: list[str]) -> dict | None:
    """The `loop run` options as keywords for `start`, or None when the full CLI should handle `argv`.

    Only the plain forms are read here (`--opt VALUE`, `--opt=VALUE`, `-t VALUE`, `--allow-dirty`, `--`
    then the agent's argv): anything else, help or a mistake, goes to the full CLI, which words it.
    Hand-written: argparse (and the gettext and locale it imports) would cost more than this file."""
    after: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, after = argv[:i], argv[i + 1:]
    kw: dict = {k: None for k in _VALUED.values()}
    kw["allow_dirty"] = False
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--allow-dirty":
            kw["allow_dirty"] = True
            i += 1
            continue
        name, eq, value = a.partition("=") if a.startswith("--") else (a, "", "")
        key = _VALUED.get(name)
        if key is None:
            return None
        if not eq:
            if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                return None
            value = argv[i + 1]
            i += 1
        i += 1
        kw[key] = value
    if kw["max_iterations"] is not None:
        v = kw["max_iterations"]
        if not v.isdigit() or int(v) < 1:
            return None
        kw["max_iterations"] = int(v)
    for k in _PATHS:
        if kw[k] is not None:
            kw[k] = Path(kw[k])
    kw["argv_after"] = after
    return kw
