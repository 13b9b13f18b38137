"""Benchmark: how many product mutations the simulated game days catch, scenarios alone (no unit test).

Each mutation breaks the product on purpose, in a process of its own (a fresh child per mutation, so nothing
leaks into the next): a behaviour mutation is pytest's MonkeyPatch on the real code path (the list of
tests/chaos/test_mutations.py, which also proves each against its own scenario and expectation); a number
mutation changes a seed default (policies/default.yaml) of the product's policy schema by a factor of two (×2 and ÷2), as the
default policy would carry it (a scenario that sets the key itself keeps its value). Then the simulated
scenarios of the standard suite (chaos/scenarios/, mode: simulated) run one by one, the scenario that caught it
in the baseline first, and the mutation stops at the first scenario that goes red (failed or error). The
children run side by side (--jobs, default every core).

Prints JSON lines (README "Benchmarks"): one per mutation (which scenario caught it), the totals against the issue 34 targets
(>= 10 of 12 behaviour mutations, every seed number) and the regression check against the committed baseline
(bench/mutation_baseline.json): a mutation caught there and caught by no scenario now exits 1 with
`mutation_score: REGRESSION: ...`. So does a red suite without any mutation (the score would mean nothing).

    bench/mutation_score.py [--only NAME-SUBSTRING] [--scenarios a,b] [--jobs N] [--list] [--write-baseline]
"""

from __future__ import annotations

import argparse
import copy
import json
import multiprocessing
import os
import sys
import tempfile
import time
from multiprocessing.connection import wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest import MonkeyPatch  # noqa: E402

from chaos import engine  # noqa: E402
from chaos.scenario import discover, load  # noqa: E402
from healer.policy.schema import Policy  # noqa: E402
from tests.chaos.test_mutations import MUTANTS  # noqa: E402

BASELINE = ROOT / "bench" / "mutation_baseline.json"
BENCH = "mutation_score"


def behaviour_mutations() -> dict[str, tuple[str, object]]:
    """name -> (the scenario that proves it, how): tests/chaos/test_mutations.py's list, each by the same patch."""
    return {name: (scenario, how) for name, (scenario, how, _exp) in MUTANTS.items()}


# the seed numbers of policies/default.yaml the simulated world runs (the dispatcher's and the supervisor's), each changed by a
# factor of two both ways: key path -> (seed value, doubled, halved, the scenario that pins it). The governed
# loop's own numbers (iterations, iteration timeout, kill grace, stall limits, memory tails) are the real loop's:
# no simulated scenario runs it (hung-agent, real mode, and tests/loop pin them).
SEEDS: dict[tuple[str, ...], tuple[object, object, object, str]] = {
    ("retry", "max_launches"): (5, 10, 2, "relaunch-storm-budget"),
    ("retry", "backoff"): (["5m", "10m", "20m", "40m"], ["10m", "20m", "40m", "80m"], ["150s", "5m", "10m", "20m"],
                           "relaunch-storm-budget"),
    ("retry", "resume_same_state_limit"): (3, 6, 1, "agent-dies-mid-flight"),
    ("retry", "rejected_proposal_replays"): (2, 4, 1, "broken-proposal"),
    ("health", "agent_idle"): ("30m", "1h", "15m", "stuck-agent"),
    ("health", "agent_stuck"): ("90m", "3h", "45m", "stuck-agent"),
    ("health", "frozen_in_progress"): ("10m", "20m", "5m", "frozen-ticket"),
    ("health", "orphan_worktree"): ("30m", "1h", "15m", "frozen-ticket"),
    ("health", "stale_labels"): ({"to-review": "2h"}, {"to-review": "4h"}, {"to-review": "1h"}, "stuck-review-label"),
    ("sentinels", "dispatch_frozen"): ("1h", "2h", "30m", "silent-dispatch"),
    ("sentinels", "pool_saturated"): ("45m", "90m", "22m30s", "saturated-pool"),
    ("sentinels", "no_closes"): ("90m", "3h", "45m", "no-closes"),
    ("sentinels", "cooldown"): ("4h", "8h", "2h", "saturated-pool"),
    ("remediation", "quiet_period"): ("4h", "8h", "2h", "human-moves-quiet-period"),
    ("remediation", "max_actions_per_tick"): (20, 40, 10, "frozen-in-progress"),
    ("repair_agent", "blocked_for"): ("3h", "6h", "90m", "repair-trigger"),
    ("repair_agent", "min_signals"): (3, 6, 1, "repair-trigger-cron"),
    ("repair_agent", "quiet_period"): ("4h", "8h", "2h", "repair-trigger-human"),
    ("repair_agent", "max_runs_per_day"): (2, 4, 1, "repair-trigger"),
    ("supervisor", "lease_ttl"): ("90s", "3m", "45s", "supervisor-standby-takeover"),
    ("fleet", "pool_size"): (4, 8, 2, "alert-flood"),
}


def number_mutations() -> dict[str, tuple[str, tuple[str, ...], object]]:
    """name -> (the scenario that pins it, key path, mutated default)."""
    out = {}
    for path, (seed, doubled, halved, scenario) in SEEDS.items():
        key = ".".join(path)
        out[f"{key} x2 ({_show(seed)} -> {_show(doubled)})"] = (scenario, path, doubled)
        out[f"{key} /2 ({_show(seed)} -> {_show(halved)})"] = (scenario, path, halved)
    return out


def _show(v: object) -> str:
    if isinstance(v, dict):
        return ",".join(f"{k}:{x}" for k, x in v.items())
    if isinstance(v, list):
        return "/".join(map(str, v))
    return str(v)


def set_default(path: tuple[str, ...], value: object) -> None:
    """The product's policy default at `path` becomes `value` in this process (healer/policy/schema.py's model)."""
    model = Policy
    for key in path[:-1]:
        model = model.model_fields[key].annotation
    field = model.model_fields[path[-1]]
    if field.default_factory is not None:
        field.default_factory = lambda v=value: copy.deepcopy(v)
    else:
        field.default = value
    model.model_rebuild(force=True)


def simulated(names: list[str] | None) -> list[str]:
    out = [s.name for s in (load(p) for p in discover(None)) if s.mode == "simulated"]
    return [n for n in out if not names or n in names]


def _run_one(name: str) -> str:
    """One scenario's status (passed / failed / error), in a temp folder of its own."""
    sc = load(discover([name])[0])
    try:
        with tempfile.TemporaryDirectory(prefix="mutation-") as d:
            return engine.run(sc, Path(d) / sc.name, keep=False).status
    except Exception:  # noqa: BLE001 - a mutation that crashes the engine is caught by that scenario
        return "error"


def job(group: str, name: str, order: list[str], stop_first: bool) -> dict:
    """In a child process of its own: apply the mutation, run `order` until a scenario goes red (all of them
    when not `stop_first`, the baseline's run). Returns what ran and what went red."""
    t0 = time.monotonic()
    mp = MonkeyPatch()
    if group == "behaviour":
        behaviour_mutations()[name][1](mp)
    elif group == "number":
        _scenario, path, value = number_mutations()[name]
        set_default(path, value)
    red, ran = [], 0
    for sc in order:
        ran += 1
        status = _run_one(sc)
        if status != "passed":
            red.append(sc)
            if stop_first:
                break
    return {"group": group, "name": name, "red": red, "ran": ran, "seconds": round(time.monotonic() - t0, 1)}


def _child(conn, args) -> None:
    try:
        conn.send(job(*args))
    except BaseException as e:  # noqa: BLE001 - reported as the mutation's result, never a hung parent
        conn.send({"group": args[0], "name": args[1], "red": [], "ran": 0, "seconds": 0, "crash": repr(e)})
    finally:
        conn.close()


def side_by_side(jobs: list[tuple], n: int):
    """Each job in a forked child of its own (the modules already loaded; the mutation dies with the child), at
    most `n` at a time; yields the results as they come."""
    ctx = multiprocessing.get_context("fork")
    pending, running = list(jobs), {}
    while pending or running:
        while pending and len(running) < max(1, n):
            args = pending.pop(0)
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_child, args=(send, args), daemon=True)
            p.start()
            send.close()
            running[recv] = (p, args)
        for conn in wait(list(running)):
            p, args = running.pop(conn)
            try:
                r = conn.recv()
            except EOFError:  # the child died without a word (a mutation that kills its process)
                r = {"group": args[0], "name": args[1], "red": [], "ran": 0, "seconds": 0, "crash": "child died"}
            p.join()
            yield r


def order_for(first: list[str], suite: list[str]) -> list[str]:
    """The suite with `first` (the baseline's catcher, the mutation's own scenario) ahead, then cheapest first."""
    head = [s for s in dict.fromkeys(first) if s in suite]
    return head + [s for s in suite if s not in head]


def load_baseline(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}


def regressions(before: dict[str, str | None], now: dict[str, dict[str, str | None]], *, whole_suite: bool = True,
                whole_list: bool = True) -> tuple[list[str], list[str]]:
    """(mutations the baseline caught that no scenario catches now, caught ones that left the list). A narrowed
    suite (--scenarios) may miss what another scenario catches: no verdict then; a narrowed list (--only) does not
    say what left it."""
    ran = {k: v for group in now.values() for k, v in group.items()}
    lost = sorted(k for k, v in before.items() if v and k in ran and ran[k] is None) if whole_suite else []
    gone = sorted(k for k, v in before.items() if v and k not in ran) if whole_suite and whole_list else []
    return lost, gone


def line(metric: str, value, unit: str, target, better: str, **extra) -> None:
    print(json.dumps({"bench": BENCH, "metric": metric, "value": value, "unit": unit, "target": target,
                      "better": better, **extra}), flush=True)


# scenarios ranked by cost (a run with real holder processes last): a mutation no scenario catches runs them all
SLOW = ("busy-worktree", "silent-dispatch", "notification-storm", "zombie-ticket-incident")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--only", default="", help="only mutations whose name contains this (or one of these, comma-separated)")
    ap.add_argument("--scenarios", default="", help="comma-separated scenario names (default: every simulated one)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="children side by side (default: every core)")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--baseline", type=Path, default=BASELINE, help="the committed catches to compare with")
    ap.add_argument("--write-baseline", action="store_true", help="write this run's catches as the baseline")
    a = ap.parse_args(argv)
    behaviours, numbers = behaviour_mutations(), number_mutations()
    if a.list:
        for n in behaviours:
            print(f"behaviour: {n}")
        for n in numbers:
            print(f"number: {n}")
        return 0
    t0 = time.monotonic()
    narrowed = [s for s in a.scenarios.split(",") if s]
    if a.write_baseline and (narrowed or a.only):
        print(f"{BENCH}: --write-baseline: the baseline is the whole list on the whole suite (no --only, no --scenarios)",
              file=sys.stderr)
        return 64
    suite = simulated(narrowed or None)
    suite = [s for s in suite if s not in SLOW] + [s for s in SLOW if s in suite]
    base = load_baseline(a.baseline)
    caught_before = {**base.get("behaviour", {}), **base.get("number", {})}
    todo = [("behaviour", n, own) for n, (own, _how) in behaviours.items()] + \
           [("number", n, own) for n, (own, _p, _v) in numbers.items()]
    todo = [t for t in todo if any(o in t[1] for o in a.only.split(","))]
    half = max(1, len(suite) // 2)
    jobs = [("baseline", f"baseline-{i}", chunk, False) for i, chunk in enumerate((suite[:half], suite[half:])) if chunk]
    jobs += [(g, n, order_for([caught_before.get(n) or "", own], suite), True) for g, n, own in todo]
    results: dict[str, dict] = {}
    red_unmutated: list[str] = []
    for r in side_by_side(jobs, a.jobs):
        if r["group"] == "baseline":
            red_unmutated += r["red"] + ([f"{r['name']}: {r['crash']}"] if "crash" in r else [])
            continue
        results[r["name"]] = r
        line(f"{r['group']}: {r['name']}", 1 if r["red"] else 0, "caught", 1, "higher",
             caught_by=r["red"][0] if r["red"] else None, scenarios_run=r["ran"], seconds=r["seconds"], **({"crash": r["crash"]} if "crash" in r else {}))
    if red_unmutated:
        line("baseline_red", len(red_unmutated), "scenarios", 0, "lower", detail=red_unmutated)
        print(f"{BENCH}: the suite is red without any mutation ({', '.join(red_unmutated)}): no score", file=sys.stderr)
        return 1
    now = {"behaviour": {}, "number": {}}
    for n, r in results.items():
        now[r["group"]][n] = r["red"][0] if r["red"] else None
    b, nb = now["behaviour"], now["number"]
    b_caught, n_caught = sum(v is not None for v in b.values()), sum(v is not None for v in nb.values())
    line("behaviour_mutations_caught", b_caught, "mutations", len(b) - 2 if len(b) >= 12 else len(b), "higher",
         of=len(b), missed=sorted(k for k, v in b.items() if v is None))
    line("seed_numbers_caught", n_caught, "mutations", len(nb), "higher", of=len(nb),
         missed=sorted(k for k, v in nb.items() if v is None))
    line("bench_wall_s", round(time.monotonic() - t0, 1), "s", 600, "lower", jobs=a.jobs, scenarios=len(suite))
    if a.write_baseline:
        a.baseline.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"{BENCH}: baseline written to {a.baseline}", file=sys.stderr)
        return 0
    lost, gone = regressions(caught_before, now, whole_suite=not narrowed, whole_list=not a.only)
    line("regressions", len(lost) + len(gone), "mutations", 0, "lower", lost=lost, removed=gone)
    for k in lost:
        print(f"{BENCH}: REGRESSION: {k!r} was caught by {caught_before[k]} in {a.baseline.name}, now by no scenario",
              file=sys.stderr)
    for k in gone:
        print(f"{BENCH}: REGRESSION: {k!r} was caught in {a.baseline.name} and is no longer in the list", file=sys.stderr)
    return 1 if lost or gone else 0


if __name__ == "__main__":
    sys.exit(main())
