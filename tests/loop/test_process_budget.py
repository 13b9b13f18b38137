"""What one `healer loop run` costs in processes (issue 15: the governed loop as cheap as a shell loop).

Every git and bwrap process healer starts goes through PATH: shims in front of the real programs count
them, so a change that adds a git call per iteration fails here rather than creeping into the bench.
The agent and the gate are plain Python (they start no git), so every counted line is healer's own.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from healer import sandbox
from tests.loop.conftest import agent, final_line, run_loop_cli, state, steps_gate, write_policy

ITERATIONS = 3
# start: the baseline snapshot (add). No `rev-parse` (the layout read from the files), no `config --list` (the
# repository's config cannot name a driver), no `status` (the snapshot found the tree to be HEAD's index), no
# `write-tree` (the index's cache-tree);
# each iteration: the agent's snapshot (add; its tree written here, not by write-tree), the gates' snapshot (add: the
# gates changed nothing); the agent's diff is counted here (lines appended to a file); the commit: commit-tree,
# update-ref (the index brought in line from the committed snapshot's own index, no reset). Blob sizes, the base's
# tree and the paths changed since the base are read from loose objects.
# a new store also gets its identity once (healer/store/identity.py: `config --get healer.fleetid`, the old board's
# ticket ids by `for-each-ref`, `config healer.fleetid ID`); an iteration's first step is now `ls-files -o -m` (what
# is over the scope caps is set aside unread, issue 31) before its add
GIT_START, GIT_PER_ITERATION, GIT_COMMIT = 4, 2, 2
# the probe (once per bwrap: a passed probe is remembered), then the agent and each gate in their own sandbox
BWRAP_START, BWRAP_PER_ITERATION = 1, 2


def _shim(bin_dir: Path, name: str, log: Path) -> None:
    real = shutil.which(name)
    assert real is not None, f"{name} not on PATH"
    p = bin_dir / name
    p.write_text(f'#!/bin/sh\necho {name} "$*" >> "{log}"\nexec "{real}" "$@"\n')
    p.chmod(0o755)


def test_git_and_bwrap_processes_per_iteration(lrepo, tmp_path):
    bwrap = sandbox.unavailable() is None
    pol = write_policy(tmp_path / "p.yaml", agent={"command": agent("loop_converge.py", "{iteration}")},
                       gates=[steps_gate(ITERATIONS)], sandbox="bwrap" if bwrap else "none")
    bin_dir, log = tmp_path / "bin", tmp_path / "spawned.log"
    bin_dir.mkdir()
    _shim(bin_dir, "git", log)
    if bwrap:
        _shim(bin_dir, "bwrap", log)
    second = tmp_path / "second"
    shutil.copytree(lrepo, second, symlinks=True)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    # the shim is another bwrap than the one probed above: its first run probes it, the second remembers it
    for repo, bwrap_start in ((lrepo, BWRAP_START), (second, 0)):
        log.unlink(missing_ok=True)
        cp = run_loop_cli(repo, pol, "--run-id", "count", env=env)
        assert cp.returncode == 0, cp.stdout + cp.stderr
        assert final_line(cp).startswith("loop count: exit 0 (success)")
        assert len(state(repo, "count")["history"]) == ITERATIONS
        lines = log.read_text().splitlines()
        gits = [ln for ln in lines if ln.startswith("git ")]
        budget = GIT_START + GIT_PER_ITERATION * ITERATIONS + GIT_COMMIT
        assert len(gits) <= budget, f"{len(gits)} git processes for {ITERATIONS} iterations (budget {budget}):\n" + "\n".join(gits)
        if bwrap:
            bwraps = [ln for ln in lines if ln.startswith("bwrap ")]
            assert len(bwraps) == bwrap_start + BWRAP_PER_ITERATION * ITERATIONS, "\n".join(bwraps)
