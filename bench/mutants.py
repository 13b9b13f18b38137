"""Benchmark: how many fresh source mutants of the decision code the simulated game days and the unit tests kill.

Mutants are drawn at random from a seed given at run time (default: a fresh one, printed, so any run can be
replayed with --seed) among every mutation site of the decision code (bench/mutate.py: the sites, the kinds of
change and the rule that excludes equivalent mutants). Each mutant is applied to a private copy of the
repository with a venv of its own (the copy first on its path, never the worktree's editable install: a `healer`
child a test starts imports the mutant too, and its test failing kills it), then, cheapest first and within a
budget of their unmutated seconds:
  - the simulated game days (chaos/scenarios, mode: simulated) that run its line, until one goes red (failed,
    error, or over three times its unmutated time in CPU seconds: a loaded machine stretches the wall clock, which is
    never a kill);
  - the unit test files that run its line (`-x`): UNIT's folders and the other test files that import the
    decision code; a line no file runs falls back to the files that import its module.
"Run its line" comes from coverage maps of the unmutated tree under .cache/mutants/ (a statement that runs at
import, outside any function, counts as run by every scenario and file that ran any line of its module: the maps
start recording after the imports): one per scenario (keyed by
the product's content), one per unit test file, children included (keyed by the product and the file: a new test
file is measured alone). A test or scenario red without any mutation is never counted as a kill.

Prints JSON lines: one per mutant (killed by which scenario / test, or survived and why), then the kill rates
of the simulated suite, of the unit tests and of both against issue 41's targets (>= 70 %, >= 90 %), and the
survivors. Exit 0 whatever the rates (`--strict`: 1 below a target).

    bench/mutants.py [--seed N] [--mutants 24] [--jobs N] [--list] [--only TEXT [--tests FILE... | --scenarios NAME...]]
                     [--sim-budget S] [--unit-budget S] [--sim-only] [--reach] [--refresh-map]
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import mutate  # noqa: E402

BENCH = "mutants"
RECORD = Path(__file__).resolve().parent / "mutants_runs.jsonl"  # --record: each measured run, one line
SCENARIOS = ROOT / "chaos" / "scenarios"
# chaos modules that judge or report a game day after it ran: they run none of the product's lines, so a new checker
# does not remeasure the maps
JUDGES = ("chaos/checkers.py", "chaos/invariants.py", "chaos/report.py", "chaos/report_ctk.py", "chaos/html_report.py")
CACHE = ROOT / ".cache" / "mutants"
# the folders whose tests exercise the decision code, every file of them; the other folders' files that import it
# (tests/chaos tests the game-day tool itself: its slow CLI and real-engine files run the decision code only in
# passing, and would triple the map's time) are added by unit_files()
UNIT = ("tests/fleet", "tests/repair", "tests/restarts", "tests/supervisor")
UNIT_MARKS = "not campaign and not serial"
UNIT_NEVER = ("spine", "docker", "bench")
# --static-unit and the fallback: the entry points a package's modules run behind (a test of `execute` runs every
# remedy handler, a test with the fleet_factory fixture runs the dispatcher's pass)
ENTRY_WORDS = {"healer/core/": ("from healer.core import decide", "from healer.core import detect"),
               "healer/remedy/": ("from healer.remedy import", "healer.remedy.actions import"),
               "healer/actions/": ("from healer.remedy import", "healer.remedy.actions import"),
               "healer/fleet/dispatch": ("fleet_factory", "from healer.fleet.dispatcher import",
                                         "from healer.fleet import dispatcher")}
MAP_CHUNK = 12  # unit test files measured per pytest run
# --static-unit: a file not yet in the unit map is assumed to take a second per this many bytes (for the budget)
STATIC_BYTES_PER_S = 1000
COPY = ("healer", "chaos", "tests", "policies", "runbooks", "bench", "pyproject.toml")
SIM_TIMEOUT_FACTOR = 3
SIM_MAP_VERSION = 2
# per mutant, the scenarios and the unit test files that run its statement, cheapest first, within these seconds of
# their unmutated time (--sim-budget, --unit-budget; 0: all of them): a statement every scenario runs (the tick)
# would otherwise cost the whole suite, 10 min on the 2-core machine, for each mutant that survives it
SIM_BUDGET = 90.0
UNIT_BUDGET = 150.0

SIMRUN = """
import sys, tempfile
from pathlib import Path
from chaos import engine
from chaos.scenario import discover, load
for name in sys.argv[1:]:
    sc = load(discover([name])[0])
    try:
        with tempfile.TemporaryDirectory(prefix="mutant-") as d:
            status = engine.run(sc, Path(d) / sc.name, keep=False).status
    except Exception as e:
        status = "error: " + type(e).__name__
    if status != "passed":
        print(name, status, flush=True)
        sys.exit(1)
"""


def line(metric: str, value, unit: str, target=None, better: str = "higher", **extra) -> None:
    print(json.dumps({"bench": BENCH, "metric": metric, "value": value, "unit": unit, "target": target,
                      "better": better, **extra}), flush=True)


def _hash_files(paths, h) -> None:
    for p in sorted(paths):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(ROOT)).encode())
            h.update(p.read_bytes())


def content_hash() -> str:
    """The product's key: what a map of any test or scenario measures (the code, but JUDGES, the shipped policies,
    runbooks and scenario parts, what is measured, the plugin). A scenario's own file is in its own key, not here: a new
    expectation remeasures that scenario alone."""
    h = hashlib.sha256()
    h.update(json.dumps([UNIT_MARKS, mutate.TARGETS, SIM_MAP_VERSION]).encode())
    h.update((BENCH_DIR / "mutants_plugin.py").read_bytes())
    tops = [ROOT / "healer", ROOT / "chaos", ROOT / "policies", ROOT / "runbooks"]
    _hash_files((p for t in tops for p in t.rglob("*")
                 if p.suffix in (".py", ".yaml", ".yml", ".json", ".md") and p.parent != SCENARIOS
                 and str(p.relative_to(ROOT)) not in JUDGES), h)
    return h.hexdigest()[:16]


def _scenario_key(path: Path, product: str) -> str:
    return hashlib.sha256(product.encode() + path.read_bytes()).hexdigest()[:16]


def _targets_abs() -> list[str]:
    return [str(p) for p in mutate.target_files(ROOT)]


# --- the coverage map of the unmutated tree -------------------------------------------------------------------

def _sim_one(name: str) -> dict:
    import coverage

    from chaos import engine
    from chaos.scenario import discover, load

    cov = coverage.Coverage(data_file=None, include=_targets_abs())
    t0 = time.monotonic()
    cov.start()
    try:
        sc = load(discover([name])[0])
        with tempfile.TemporaryDirectory(prefix="mutants-map-") as d:
            status = engine.run(sc, Path(d) / sc.name, keep=False).status
    except Exception as e:  # noqa: BLE001 - recorded: a red scenario never counts as a kill
        status = f"error: {e!r}"
    finally:
        cov.stop()
    data = cov.get_data()
    lines = {os.path.relpath(f, ROOT): sorted(data.lines(f) or []) for f in data.measured_files()}
    return {"status": status, "seconds": round(time.monotonic() - t0, 2), "lines": lines}


def _sim_child(conn, name: str) -> None:
    try:
        conn.send(_sim_one(name))
    except BaseException as e:  # noqa: BLE001
        conn.send({"status": f"error: {e!r}", "seconds": 0, "lines": {}})
    finally:
        conn.close()


def simulated() -> dict[str, Path]:
    from chaos.scenario import discover, load

    return {sc.name: p for sc, p in ((load(p), p) for p in discover(None)) if sc.mode == "simulated"}


def sim_map(names: list[str], jobs: int) -> dict:
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("fork")
    out, pending, running = {}, list(names), {}
    while pending or running:
        while pending and len(running) < jobs:
            name = pending.pop(0)
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_sim_child, args=(send, name), daemon=True)
            p.start()
            send.close()
            running[recv] = (p, name)
        for conn in wait(list(running)):
            p, name = running.pop(conn)
            try:
                out[name] = conn.recv()
            except EOFError:
                out[name] = {"status": "error: child died", "seconds": 0, "lines": {}}
            p.join()
            print(f"{BENCH}: map: scenario {name} {out[name]['status']} ({out[name]['seconds']} s)", file=sys.stderr)
    return out


def unit_files() -> list[str]:
    """Every test file of the UNIT folders, and those of the other folders (but the spine's architecture checks
    and docker's) that import a module of the decision code."""
    out = {str(p.relative_to(ROOT)) for d in UNIT for p in (ROOT / d).rglob("test_*.py")}
    words = {w for t in mutate.target_files(ROOT) for w in _module_words(str(t.relative_to(ROOT)))[:3]}
    for p in (ROOT / "tests").rglob("test_*.py"):
        rel = str(p.relative_to(ROOT))
        if rel not in out and p.parts[-2] not in UNIT_NEVER and any(w in p.read_text() for w in words):
            out.add(rel)
    return sorted(out)


def _file_key(rel: str, product: str) -> str:
    """A test file's map entry is valid while the product and the file (and its folder's conftest) are as measured."""
    h = hashlib.sha256(product.encode())
    for p in (ROOT / rel, *(c for c in (ROOT / rel).parents if (c / "conftest.py").exists() and ROOT in c.parents)):
        f = p / "conftest.py" if p.is_dir() else p
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def unit_map(files: list[str], jobs: int) -> dict:
    """{file: {"lines": {module: [lines]}, "seconds": s, "red": [test ids red unmutated]}} for `files`, measured in
    one pytest run under coverage (context: the test file; children of a test record under its file)."""
    out = {f: {"lines": {}, "seconds": 0.0, "red": []} for f in files}
    if not files:
        return out
    with tempfile.TemporaryDirectory(prefix="mutants-cover-") as d:
        rc = Path(d) / "childrc"
        include = "\n    ".join(_targets_abs())
        rc.write_text(f"[run]\nparallel = True\ndata_file = {d}/child\ncontext = ${{HEALER_MUT_CTX}}\n"
                      f"include =\n    {include}\n")
        env = {**os.environ, "HEALER_MUT_COVER": d, "HEALER_MUT_RC": str(rc),
               "HEALER_MUT_INCLUDE": json.dumps(_targets_abs()),
               "PYTHONPATH": os.pathsep.join([str(BENCH_DIR), os.environ.get("PYTHONPATH", "")])}
        for k in ("COVERAGE_PROCESS_START", "HEALER_MUT_CTX", "HEALER_MUT_DESELECT"):
            env.pop(k, None)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "mutants_plugin", "-n", str(jobs), "-m", UNIT_MARKS,
               "--timeout", "300", *files]
        print(f"{BENCH}: map: {len(files)} unit test files under coverage, -n {jobs}", file=sys.stderr)
        subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, check=False)
        import coverage

        for part in Path(d).iterdir():
            if part.name.startswith("outcome."):
                o = json.loads(part.read_text())
                for t, res in o["outcome"].items():
                    if res != "passed" and t.split("::")[0] in out:
                        out[t.split("::")[0]]["red"].append(t)
                for f, s in o["seconds"].items():
                    if f in out:
                        out[f]["seconds"] = s
            elif part.name.startswith(("inproc.", "child.")):
                data = coverage.CoverageData(basename=str(part))
                try:
                    data.read()
                except Exception:  # noqa: BLE001 - a child killed while writing: its lines are lost, no more
                    continue
                for src in data.measured_files():
                    rel = os.path.relpath(src, ROOT)
                    for ln, ctxs in data.contexts_by_lineno(src).items():
                        for c in ctxs:
                            if c in out:
                                out[c]["lines"].setdefault(rel, set()).add(ln)
    for v in out.values():
        v["lines"] = {k: sorted(s) for k, s in v["lines"].items()}
    return out


def coverage_map(jobs: int, refresh: bool, unit_map_wanted: bool = True) -> dict:
    """The scenarios' map (keyed by the product) and the unit test files' map (one entry per file, keyed by the
    product and the file: a new or changed test file is measured alone, not the whole folder again)."""
    t0 = time.monotonic()
    product = content_hash()
    CACHE.mkdir(parents=True, exist_ok=True)
    sim_path = CACHE / "sim.json"
    sim = {} if refresh or not sim_path.exists() else json.loads(sim_path.read_text())
    scen = simulated()
    skeys = {n: _scenario_key(p, product) for n, p in scen.items()}
    sim_stale = [n for n in scen if sim.get(n, {}).get("key") != skeys[n]]
    if sim_stale:
        for n, v in sim_map(sim_stale, jobs).items():
            sim[n] = {**v, "key": skeys[n]}
        _write(sim_path, sim)
    sim = {n: sim[n] for n in scen}
    unit_path = CACHE / "unit.json"
    cached = {} if refresh or not unit_path.exists() else json.loads(unit_path.read_text())
    files = unit_files()
    keys = {f: _file_key(f, product) for f in files}
    stale = [f for f in files if cached.get(f, {}).get("key") != keys[f]]
    if not unit_map_wanted:  # --static-unit: the files that import the mutant's module, smallest first (no map)
        unit = {f: cached[f] if f not in stale else
                {"lines": {}, "seconds": (ROOT / f).stat().st_size / STATIC_BYTES_PER_S, "red": [], "static": True}
                for f in files}
        return {"sim": sim, "unit": unit}
    for i in range(0, len(stale), MAP_CHUNK):  # saved chunk by chunk: an interrupted map keeps what it measured
        for f, v in unit_map(stale[i:i + MAP_CHUNK], jobs).items():
            cached[f] = {**v, "key": keys[f]}
        _write(unit_path, cached)
    unit = {f: cached[f] for f in files}
    if stale or sim_stale:
        line("map_wall_s", round(time.monotonic() - t0, 1), "s", better="lower", unit_files_measured=len(stale),
             scenarios_measured=len(sim_stale))
    return {"sim": sim, "unit": unit}


def _write(path: Path, data) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def _module_words(path: str) -> tuple[str, ...]:
    """How a test file names the module a mutant is in: its dotted name, or `from package import stem`."""
    dotted = path[:-3].replace("/", ".")
    pkg, stem = dotted.rsplit(".", 1)
    return (dotted, f"from {pkg} import {stem}", f"{pkg} import ({stem}", f" {stem},", f" {stem}\n")


_IMPORT_TIME: dict[str, frozenset[int]] = {}


def import_time(path: str) -> frozenset[int]:
    """The first lines of the statements of `path` that run when it is imported (outside any function: module and
    class bodies, e.g. the default rules' table). The maps' coverage starts after the imports, so no scenario and no
    test records them as run: a process that ran any line of the module imported it, and ran these."""
    got = _IMPORT_TIME.get(path)
    if got is None:
        out: set[int] = set()

        def walk(node: ast.AST) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    continue
                if isinstance(child, ast.stmt):
                    out.add(child.lineno)
                walk(child)

        walk(ast.parse((ROOT / path).read_text()))
        got = _IMPORT_TIME[path] = frozenset(out)
    return got


def runners(cmap: dict, m: mutate.Mutant) -> tuple[list[str], list[str], bool, tuple[int, int]]:
    """(scenarios, unit test files) that ran the mutant's statement green in the unmutated tree, cheapest first,
    within the budgets; whether the files are a fallback; how many (scenarios, files) run it in all. A fallback:
    when no test file ran the statement (in process or in a child that recorded coverage), every unit file that
    imports the module is run (a child that wrote no coverage, e.g. one with a scrubbed environment or killed,
    still kills by failing its test)."""
    at_import = m.stmt_line in import_time(m.path)

    def runs(lines: dict) -> bool:
        ran = lines.get(m.path, ())
        return m.stmt_line in set(ran) or (at_import and bool(ran))

    sims = [(v["seconds"], n) for n, v in cmap["sim"].items() if v["status"] == "passed" and runs(v["lines"])]
    files = [(v["seconds"], f) for f, v in cmap["unit"].items() if runs(v["lines"])]
    fallback = False
    if not files:
        words = _module_words(m.path)
        words = (*words, *(w for pre, ws in ENTRY_WORDS.items() if m.path.startswith(pre) for w in ws))
        files = [(v["seconds"], f) for f, v in cmap["unit"].items()
                 if any(w in (ROOT / f).read_text() for w in words)]
        fallback = bool(files)
    return _within(sorted(sims), SIM_BUDGET), _within(sorted(files), UNIT_BUDGET), fallback, (len(sims), len(files))


def _within(ranked: list[tuple[float, str]], budget: float) -> list[str]:
    """The cheapest first, as many as fit in `budget` seconds of their unmutated time (at least one; 0: all)."""
    out, spent = [], 0.0
    for secs, name in ranked:
        if out and budget and spent + secs > budget:
            break
        out.append(name)
        spent += secs
    return out


# --- one mutant --------------------------------------------------------------------------------------------------

def _copy_tree(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z", "--", *COPY], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in files.decode().split("\0"):
        if not rel or not (ROOT / rel).is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)
    for top in ("healer", "chaos", "tests", "bench"):  # untracked work in progress runs as it is on disk
        for p in (ROOT / top).rglob("*.py"):
            r = p.relative_to(ROOT)
            if not (dest / r).exists() and "__pycache__" not in r.parts:
                (dest / r).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(p, dest / r)


def _venv(copy: Path) -> Path:
    """A venv of the copy's own, so that every process of a test (pytest, and each `python -m healer` or `healer`
    child it starts with sys.executable, whatever environment it passes) imports the mutated copy and never the
    editable install of the worktree: its site-packages puts the copy first, then this venv's third-party packages
    (their .pth files, the editable finder among them, are not run)."""
    import site
    import venv

    env_dir = copy / ".venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    py = env_dir / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    ours = [p for p in site.getsitepackages() if p.endswith("site-packages")]
    Path(purelib, "healer_mutant.pth").write_text("\n".join([str(copy), *ours]) + "\n")
    script = env_dir / "bin" / "healer"
    script.write_text(f"#!{py}\nimport sys\nfrom healer.launch import entry\nsys.exit(entry())\n")
    script.chmod(0o755)
    cli = ROOT / ".venv" / "agents-cli"
    if cli.exists():
        (env_dir / "agents-cli").symlink_to(cli.resolve())
    return py


WALL_FACTOR = 6  # a loaded machine stretches wall time, not CPU time: the wall cap is this many CPU budgets


def _cpu_seconds(proc) -> float:
    """User + system CPU seconds of a process and its children (psutil), 0 once it is gone."""
    import psutil

    try:
        p = psutil.Process(proc.pid)
        t = p.cpu_times()
        return t.user + t.system + t.children_user + t.children_system
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return 0.0


def _run_cpu_limited(cmd: list[str], cwd: Path, env: dict, budget: float) -> tuple[int | None, str, str | None]:
    """Run the game days of one mutant: (exit code or None at the wall cap, stdout, why it was killed as a runaway).
    A mutant that loops forever burns CPU: over `budget` CPU seconds (three times the unmutated wall time) it is
    red. A machine loaded by other work stretches the wall clock instead, and that is never a kill (a kill by the
    machine's load is how seed 101 first counted `rules.py:41 30 -> 31` dead)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read() if proc.stdout else ""),
                                            daemon=True)
    reader.start()
    t0, why = time.monotonic(), None
    while proc.poll() is None:
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        if proc.poll() is not None:
            break
        cpu = _cpu_seconds(proc)
        if cpu > budget:
            why = f"timeout: over {budget:.0f} s of CPU"
        elif time.monotonic() - t0 > WALL_FACTOR * budget:
            why = ""
        if why is not None:
            proc.kill()
            proc.wait()
            break
    reader.join(10)
    text = "".join(out)
    if why == "":
        return None, text, None
    return (None if why else proc.returncode), text, why


def run_mutant(m: mutate.Mutant, cmap: dict, tests: list[str] | None = None, scenarios: list[str] | None = None,
               sim_only: bool = False) -> dict:
    if tests is not None or scenarios is not None:  # chosen by hand: check that a new test kills a survivor
        sims, files, fallback = list(scenarios or ()), list(tests or ()), False
        covering = (len(sims), len(files))
    else:
        sims, files, fallback, covering = runners(cmap, m)
        if sim_only:
            files = []
    t0 = time.monotonic()
    res = {"id": m.id, "path": m.path, "line": m.line, "op": m.op, "before": m.before[:80], "after": m.after[:80],
           "sim_runners": f"{len(sims)}/{covering[0]}", "unit_files": f"{len(files)}/{covering[1]}", "unit_fallback": fallback, "sim": None, "unit": None}
    with tempfile.TemporaryDirectory(prefix="mutant-") as d:
        copy = Path(d) / "repo"
        _copy_tree(copy)
        target = copy / m.path
        target.write_text(m.apply(target.read_text()))
        py = _venv(copy)
        env = {**os.environ, "PYTHONPATH": str(copy / "bench"), "PYTHONDONTWRITEBYTECODE": "1",
               "PATH": os.pathsep.join([str(py.parent), os.environ.get("PATH", "")]),
               "VIRTUAL_ENV": str(py.parent.parent)}
        for k in ("HEALER_MUT_COVER", "COVERAGE_PROCESS_START", "HEALER_MUT_CTX"):
            env.pop(k, None)
        if sims:
            budget = SIM_TIMEOUT_FACTOR * sum(cmap["sim"].get(n, {}).get("seconds", 60) for n in sims) + 60
            rc, out, why = _run_cpu_limited([str(py), "-c", SIMRUN, *sims], copy, env, budget)
            if why:
                res["sim"] = why
            elif rc is None:  # the wall-clock cap of a loaded machine, not the mutant's CPU: no kill, say so
                res["sim_inconclusive"] = f"wall-clock cap of {WALL_FACTOR * budget:.0f} s reached below the CPU budget"
            elif rc != 0:
                res["sim"] = (out.strip().splitlines() or [f"exit {rc}"])[-1]
        if files:
            red = [t for f in files for t in cmap["unit"].get(f, {}).get("red", ())]
            sel = Path(d) / "deselect"
            sel.write_text("\n".join(red))
            budget = max(300, SIM_TIMEOUT_FACTOR * sum(cmap["unit"].get(f, {}).get("seconds", 60) for f in files) + 120)
            try:
                r = subprocess.run([str(py), "-m", "pytest", "-x", "-q", "-n", "0", "-p", "mutants_plugin",
                                    "-m", UNIT_MARKS, "--timeout", "300", *files], cwd=copy,
                                   env={**env, "HEALER_MUT_DESELECT": str(sel)}, capture_output=True, text=True,
                                   timeout=budget)
                if r.returncode == 1:
                    failed = [ln for ln in r.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
                    res["unit"] = (failed[0][:160] if failed else "failed")
                elif r.returncode not in (0, 5):
                    res["unit"] = f"pytest exit {r.returncode}"
            except subprocess.TimeoutExpired:  # over a budget that may be a guess (--static-unit): no kill
                res["unit_timeout"] = f"timeout after {budget:.0f} s"
    res["killed"] = bool(res["sim"] or res["unit"])
    res["seconds"] = round(time.monotonic() - t0, 1)
    if not sims and not files:
        res["why"] = "not covered: no scenario or unit test file runs this line or imports its module"
    return res


def main(argv: list[str] | None = None) -> int:
    global SIM_BUDGET, UNIT_BUDGET
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seed", type=int, default=None, help="the draw's seed (default: a fresh one, printed)")
    ap.add_argument("--mutants", type=int, default=24, help="how many mutants to draw (default 24)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="mutants side by side (default: every core)")
    ap.add_argument("--list", action="store_true", help="print the drawn mutants and exit (no map, no run)")
    ap.add_argument("--only", action="append", default=[], metavar="TEXT",
                    help="run only the drawn mutants whose id contains TEXT (repeatable): re-check a survivor")
    ap.add_argument("--tests", nargs="+", metavar="FILE",
                    help="with --only: run these unit test files (or ids) instead of the map's, no scenarios: does a new "
                         "test kill the survivor? (no map is made)")
    ap.add_argument("--scenarios", nargs="+", metavar="NAME", help="with --only: run these scenarios, as --tests")
    ap.add_argument("--sim-budget", type=float, default=SIM_BUDGET,
                    help=f"seconds of scenarios (unmutated time) per mutant, cheapest first (default {SIM_BUDGET:.0f}; 0: all)")
    ap.add_argument("--unit-budget", type=float, default=UNIT_BUDGET,
                    help=f"seconds of unit test files per mutant, as --sim-budget (default {UNIT_BUDGET:.0f}; 0: all)")
    ap.add_argument("--static-unit", action="store_true",
                    help="no unit coverage map: a mutant's unit files are those that import its module (and those "
                         "the map already holds that run its line), smallest first, within --unit-budget")
    ap.add_argument("--reach", action="store_true",
                    help="no mutant: print, per file and in all, how many mutation sites some green simulated game day "
                         "runs (the simulated kill rate's ceiling), from the coverage map")
    ap.add_argument("--sim-only", action="store_true",
                    help="the simulated game days only, no unit test (the game days' own kill rate, faster)")
    ap.add_argument("--record", action="store_true", help=f"append the run's numbers to {RECORD.name}")
    ap.add_argument("--record-from", type=Path, metavar="FILE", help="append an earlier run's numbers (its output)")
    ap.add_argument("--refresh-map", action="store_true", help="remake the coverage map even if cached")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a kill rate is below its target")
    a = ap.parse_args(argv)
    if a.record_from:
        return record_from(a.record_from, a.static_unit)
    SIM_BUDGET, UNIT_BUDGET = a.sim_budget, a.unit_budget
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "big")
    t0 = time.monotonic()
    sites = mutate.every_site(ROOT)
    drawn = mutate.draw(sites, a.mutants, seed)
    if a.only:
        drawn = [m for m in drawn if any(t in m.id for t in a.only)]
    line("draw", len(drawn), "mutants", seed=seed, sites=len(sites), replay=f"bench/mutants.py --seed {seed}")
    if a.list:
        for m in drawn:
            print(json.dumps(m.as_dict()))
        return 0
    by_hand = a.tests is not None or a.scenarios is not None
    if a.reach:
        return reach(coverage_map(a.jobs, a.refresh_map, False)["sim"], sites)
    cmap = {"sim": {}, "unit": {}} if by_hand else coverage_map(a.jobs, a.refresh_map, not (a.static_unit or a.sim_only))
    red = [n for n, v in cmap["sim"].items() if v["status"] != "passed"]
    if red:
        print(f"{BENCH}: scenarios red without any mutation (never counted as kills): {', '.join(red)}", file=sys.stderr)
    results = []
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        for r in pool.map(lambda m: run_mutant(m, cmap, a.tests, a.scenarios, sim_only=a.sim_only), drawn):
            results.append(r)
            print(json.dumps({"bench": BENCH, "mutant": r}), flush=True)
    sim, both = summary(results, seed, time.monotonic() - t0, a.jobs, a.static_unit,
                        record=a.record and not a.only and not by_hand and not a.sim_only)
    return 1 if a.strict and (sim < 0.70 or both < 0.90) else 0


def reach(sim: dict, sites: list[mutate.Mutant]) -> int:
    """--reach: the sites some green simulated game day runs, per file (fewest run first) and in all."""
    per: dict[str, list[int]] = {}
    for m in sites:
        fake = {"sim": sim, "unit": {}}
        ran = bool(runners(fake, m)[3][0])
        per.setdefault(m.path, [0, 0])
        per[m.path][0] += ran
        per[m.path][1] += 1
    for path, (ran, n) in sorted(per.items(), key=lambda kv: kv[1][0] - kv[1][1]):
        line("sim_reach_file", round(ran / n, 3), "fraction", path=path, run=ran, sites=n)
    ran, n = sum(v[0] for v in per.values()), sum(v[1] for v in per.values())
    line("sim_reach", round(ran / max(1, n), 3), "fraction", run=ran, sites=n)
    return 0


def summary(results: list[dict], seed: int, wall: float, jobs: int, static: bool, record: bool = False) -> tuple[float, float]:
    """The rate lines; with `record`, the run's numbers appended to RECORD (committed: the measured history)."""
    n = len(results) or 1
    k_sim = sum(bool(r["sim"]) for r in results)
    k_unit = sum(bool(r["unit"]) for r in results)
    k_both = sum(bool(r["killed"]) for r in results)
    line("sim_kill_rate", round(k_sim / n, 3), "fraction", 0.70, killed=k_sim, of=len(results))
    line("unit_kill_rate", round(k_unit / n, 3), "fraction", None, killed=k_unit, of=len(results))
    line("combined_kill_rate", round(k_both / n, 3), "fraction", 0.90, killed=k_both, of=len(results))
    survivors = [f"{r['path']}:{r['line']} {r['op']}: {r['before']!r} -> {r['after']!r}" for r in results if not r["killed"]]
    line("survivors", len(survivors), "mutants", 0, "lower", ids=survivors)
    line("bench_wall_s", round(wall, 1), "s", better="lower", seed=seed, jobs=jobs)
    if record:
        import subprocess as sp

        head = sp.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        row = {"seed": seed, "mutants": len(results), "killed_sim": k_sim, "killed_unit": k_unit, "killed_both": k_both,
               "sim_rate": round(k_sim / n, 3), "combined_rate": round(k_both / n, 3), "survivors": survivors,
               "unit_selection": "static (importers)" if static else "coverage map", "jobs": jobs,
               "wall_s": round(wall), "commit": head, "date": time.strftime("%Y-%m-%d", time.gmtime())}
        with RECORD.open("a") as f:
            f.write(json.dumps(row) + "\n")
    return k_sim / n, k_both / n


def record_from(path: Path, static: bool) -> int:
    """--record-from FILE: the summary of an earlier run's JSON lines (its mutant lines), appended to RECORD."""
    rows = [json.loads(ln) for ln in path.read_text().splitlines() if ln.startswith("{")]
    results = [r["mutant"] for r in rows if "mutant" in r]
    for r in results:  # a run before a unit timeout stopped counting as a kill: the same rule as run_mutant's
        if str(r.get("unit") or "").startswith("timeout"):
            r["unit_timeout"], r["unit"] = r["unit"], None
            r["killed"] = bool(r["sim"])
    draw = next(r for r in rows if r.get("metric") == "draw")
    wall = next((r["value"] for r in rows if r.get("metric") == "bench_wall_s"), sum(r["seconds"] for r in results))
    summary(results, draw["seed"], wall, 1, static, record=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
