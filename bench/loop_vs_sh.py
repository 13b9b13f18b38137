"""Benchmark: `healer loop run` beside the reference bash loop (../shared/fixtures/loop-sh/loop.sh), issue 15.

Same agent (a Python script that waits 1 s, standing in for a model's answer, then adds one line to
work.txt), same gate (a Python script that passes once work.txt has 3 lines; its failure line names the
count, so neither loop sees a stall), same 3 iterations,
each run in a fresh clone of one repository, the two alternated. Wall time and CPU (the loop and
everything it started) per run; medians; ratio healer / loop.sh (target <= 1.2), the median of each
alternated pair's own ratio (both runs of a pair saw the same load). A third run per round, the same loop
with `sandbox: none`, prints what the sandbox costs (informational, no target). A fourth, the agent and the
gate run three times each by the bench itself with nothing around them, is the programs' own CPU (the floor
both loops pay): each loop's overhead above it is printed too, so a machine where the ratio misses shows
whose overhead grew (informational, no target).

Both sides see the same environment, as an installed healer runs: Python may keep bytecode (in a
pycache folder inside the bench's temp dir, whatever PYTHONDONTWRITEBYTECODE says outside) and
healer keeps its cache of validated policies there too (HEALER_CACHE_DIR). The first pair warms
both and the page cache and is not counted; `healer_loop_cold_cpu_s` is that first healer run, for
the record (a loop started with a policy it never validated, and no bytecode).

Prints JSON lines (README "Benchmarks").
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from healer.clock import system  # noqa: E402

CLOCK = system()
QUICK = "--quick" in sys.argv
# vendored from ../shared/fixtures/loop-sh/ so the bench runs from any clone
LOOP_SH = Path(os.environ.get("HEALER_LOOP_SH", Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "loop-sh" / "loop.sh"))
AGENT = "import sys, time\ntime.sleep(1.0)\nwith open('work.txt', 'a') as f:\n    f.write('step\\n')\n"
GATE = ("import sys\nn = len(open('work.txt').read().splitlines()) if __import__('os').path.exists('work.txt') else 0\n"
        "print(f'FAIL: {n} lines' if n < 3 else 'ok')\nsys.exit(0 if n >= 3 else 1)\n")


def emit(metric: str, value: float, unit: str, target: float | None, better: str = "lower") -> None:
    print(json.dumps({"bench": "loop_vs_sh", "metric": metric, "value": round(value, 3), "unit": unit, "target": target,
                      "better": better}), flush=True)


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def template(d: Path) -> Path:
    t = d / "template"
    t.mkdir()
    git(t, "init", "-q", "-b", "main")
    git(t, "config", "user.email", "b@healer.invalid")
    git(t, "config", "user.name", "bench")
    (t / "README.md").write_text("# bench\n")
    (t / "task.md").write_text("Add lines to work.txt until the gate passes.\n")
    (t / ".gitignore").write_text(".healer/\n.loop/\nprogress.md\n")
    (d / "agent.py").write_text(AGENT)
    (d / "gate.py").write_text(GATE)
    py = sys.executable
    (t / "healer.yaml").write_text(
        "loop:\n"
        f"  agent: {{preset: command, command: [{json.dumps(py)}, {json.dumps(str(d / 'agent.py'))}, \"{{prompt_file}}\"]}}\n"
        f"  gates: [{{name: gate, run: [{json.dumps(py)}, {json.dumps(str(d / 'gate.py'))}], timeout: 1m}}]\n"
        "  max_iterations: 8\n")
    git(t, "add", "-A")
    git(t, "commit", "-q", "-m", "initial")
    # the same loop without its sandbox (`sandbox: none`), to show what the sandbox costs: not the target
    (d / "unsandboxed.yaml").write_text((t / "healer.yaml").read_text() + "  sandbox: none\n")
    return t


def timed(argv: list[str], cwd: Path, env: dict, check: bool = True) -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = CLOCK.monotonic()
    r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    wall = CLOCK.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if check and r.returncode != 0:
        raise SystemExit(f"{argv[:3]} exited {r.returncode}: {(r.stderr or r.stdout)[-400:]}")
    return wall, cpu, r.returncode


def floor(wd: Path, env: dict, py: str, d: Path) -> tuple[float, float]:
    """The agent and the gate, three times each, run by the bench with nothing around them: what both loops
    cannot avoid paying."""
    wall = cpu = 0.0
    for _ in range(3):
        w, c, _ = timed([py, str(d / "agent.py"), "prompt"], wd, env)
        gw, gc, _ = timed([py, str(d / "gate.py")], wd, env, check=False)  # fails until the third line: its answer
        wall, cpu = wall + w + gw, cpu + c + gc
    return wall, cpu


def main() -> int:
    if not LOOP_SH.exists():
        print(f"loop_vs_sh: {LOOP_SH} not found (set HEALER_LOOP_SH)", file=sys.stderr)
        return 0
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="healer-loop-vs-sh-") as tmp:
        d = Path(tmp)
        tpl = template(d)
        env = {**os.environ, "AGENT": f"{py} {d / 'agent.py'}", "GATES": f"{py} {d / 'gate.py'}", "MAX_ITER": "8",
               "PYTHONPYCACHEPREFIX": str(d / "pycache"), "HEALER_CACHE_DIR": str(d / "cache")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        runs: dict[str, list[tuple[float, float]]] = {"healer": [], "sh": [], "bare": [], "floor": []}
        cold: list[float] = []
        pairs = 3 if QUICK else 9
        for i in range(pairs + 1):  # the first round warms the page cache and is not counted
            for side in (("sh", "healer", "bare", "floor") if i % 2 else ("healer", "sh", "bare", "floor")):
                wd = d / f"{side}-{i}"
                shutil.copytree(tpl, wd)
                loop = [py, "-m", "healer", "loop", "run", "--task", "task.md", "--workdir", str(wd)]
                if side == "floor":
                    w, c = floor(wd, env, py, d)
                elif side == "sh":
                    w, c, _ = timed(["bash", str(LOOP_SH)], wd, env)
                elif side == "bare":
                    w, c, _ = timed([*loop, "--policy", str(d / "unsandboxed.yaml")], wd, env)
                else:
                    w, c, _ = timed(loop, wd, env)
                assert len((wd / "work.txt").read_text().splitlines()) == 3, side
                if i:
                    runs[side].append((w, c))
                elif side == "healer":
                    cold.append(c)
                shutil.rmtree(wd)
    med = {s: (statistics.median(x[0] for x in r), statistics.median(x[1] for x in r)) for s, r in runs.items()}
    # the ratios: median over the pairs of each pair's own ratio (its two runs saw the same load),
    # steadier on a shared machine than the ratio of the two medians
    pairs_r = list(zip(runs["healer"], runs["sh"], strict=True))
    bare_r = statistics.median(h[1] / b[1] for h, b in zip(runs["bare"], runs["sh"], strict=True))
    wall_r = statistics.median(h[0] / b[0] for h, b in pairs_r)
    cpu_r = statistics.median(h[1] / b[1] for h, b in pairs_r)
    emit("loop_sh_wall_s", med["sh"][0], "s", 10)
    emit("healer_loop_wall_s", med["healer"][0], "s", 10)
    emit("healer_over_loop_sh_wall", wall_r, "ratio", 1.2)
    emit("loop_sh_cpu_s", med["sh"][1], "s", 10)
    emit("healer_loop_cpu_s", med["healer"][1], "s", 10)
    emit("healer_over_loop_sh_cpu", cpu_r, "ratio", 1.2)
    emit("healer_loop_cold_cpu_s", cold[0], "s", 10)
    # what the bubblewrap sandbox (one per agent call and per gate) costs: the same loop without it
    emit("healer_unsandboxed_loop_cpu_s", med["bare"][1], "s", None)
    emit("healer_unsandboxed_over_loop_sh_cpu", bare_r, "ratio", None)
    # the programs alone, and what each loop adds to them (runner or bash, its git, its tools, the sandbox)
    emit("programs_alone_cpu_s", med["floor"][1], "s", None)
    for side, metric in (("sh", "loop_sh_overhead_cpu_s"), ("healer", "healer_overhead_cpu_s")):
        emit(metric, statistics.median(r[1] - f[1] for r, f in zip(runs[side], runs["floor"], strict=True)), "s", None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
