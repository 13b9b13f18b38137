"""Exploration: generated fault schedules against the simulated engine, held to the invariants.

A *schedule* is a plain dict (JSON/YAML-able): the engine's seed, a duration, a pool size,
tickets (one scripted behaviour each) and timed faults (kind x time x target). Two ways to
make one, over the same space:

* `schedules()`: a hypothesis strategy. `explore()` (and tests/chaos/test_explore.py) search it
  with `@given`, so a failing schedule is *shrunk* (fewer faults, fewer tickets, earlier and
  simpler faults) before it is reported.
* `schedule_for_seed(n)`: a pure function of `n` (random.Random), for `healer gameday replay
  --seed N` without a file and for quick smoke runs.

A failure is written as an ordinary scenario file (`scenario_yaml`) whose seed is the
engine's seed, so `healer gameday replay --seed N FILE` (or `--schedule FILE`) re-runs it
deterministically: the simulated engine is a pure function of (scenario, seed).
"""

from __future__ import annotations

import json
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from chaos import engine
from chaos.checkers import STANDARD
from chaos.faults import registry, worlds
from chaos.scenario import Scenario, load
from healer.errors import InvalidInput
from healer.policy.yamlpos import YamlProblem, load_one, read_capped, read_text
from healer.store import open_store

# the invariants: one live agent per ticket, no user file deleted, every intent settled,
# one lease holder, notifications within quota; plus two the engine can see for free
INVARIANTS = (*STANDARD, *(n for n in ("notifications_within_quota", "never_merged_broken", "no_double_effect")
                           if n not in STANDARD))

BEHAVIOURS = ("succeeds", "random", "fails", "fails_same_commit", "dies", "hangs", "broken_proposal", "noop")


def timed_faults() -> tuple[str, ...]:
    """The faults a schedule draws (their `FaultSpec.explore`), in the registry's order: those the simulated world
    injects (chaos/faults/registry.py says why the others are left out)."""
    return tuple(f.name for f in registry.FAULTS.values() if f.explore is not None and worlds.injector(f, registry.SIM))

# failpoints the simulated supervisor passes through (the remediation executor and quarantine); a hit crashes it
FAILPOINTS = ("remedy.after_intent", "remedy.after_begun", "remedy.after_effect", "remedy.after_done",
              "quarantine.after_copy", "quarantine.after_manifest", "quarantine.after_move")
MAX_TICKETS = 8
MAX_FAULTS = 8
DURATIONS = (3600, 2 * 3600, 4 * 3600)  # long enough for backoffs, leases and cooldowns to play out
POLICY = {"fleet": {"main_gates": [{"name": "tests", "run": ["python", "-m", "pytest"]}]}}  # so red main is seen


def make_fault(kind: str, minute: int, target: str | None, n: int) -> dict[str, Any]:
    """One fault in scenario form; `n` (1..) sizes what has a size."""
    f: dict[str, Any] = {"fault": kind, "at": f"{minute}m"}
    how = registry.FAULTS[kind].explore or registry.Explore()
    if target is not None and how.ticket:
        f["target"] = target
    if how.size is not None:
        f.update(how.size(n))
    return f


def _targets(n_tickets: int) -> list[str | None]:
    return [None, "E-*", *(f"E-{i}" for i in range(1, n_tickets + 1))]


# -- hypothesis ---------------------------------------------------------------------

def schedules(max_tickets: int = MAX_TICKETS, max_faults: int = MAX_FAULTS):
    """A hypothesis strategy of schedules (dicts). Shrinks toward one `succeeds` ticket and no fault."""
    from hypothesis import strategies as st  # lazy: hypothesis, 130 ms (-X importtime) on `gameday list` (load_all)

    @st.composite
    def build(draw) -> dict[str, Any]:
        duration = draw(st.sampled_from(DURATIONS))
        tickets = draw(st.lists(st.sampled_from(BEHAVIOURS), min_size=1, max_size=max_tickets))
        targets = _targets(len(tickets))
        timed = st.builds(make_fault, st.sampled_from(timed_faults()), st.integers(1, duration // 60),
                          st.sampled_from(targets), st.integers(1, 8))
        faults = draw(st.lists(timed, max_size=max_faults))
        faults.sort(key=lambda f: int(f["at"][:-1]))  # a schedule reads in time order; shrinking keeps it sorted
        fps = draw(st.lists(st.sampled_from(FAILPOINTS), max_size=2, unique=True))
        faults += [{"fault": "failpoint", "failpoint": name, "hit": draw(st.integers(1, 3))} for name in fps]
        return {"seed": draw(st.integers(0, 2**16)), "duration": duration,
                "pool_size": draw(st.integers(1, 4)), "tickets": tickets, "faults": faults}

    return build()


# -- seeded ---------------------------------------------------------------------------

def schedule_for_seed(seed: int) -> dict[str, Any]:
    """The schedule of `seed`: a pure function of it, over the same space as `schedules()`."""
    rng = random.Random(seed)
    duration = rng.choice(DURATIONS)
    tickets = [rng.choice(BEHAVIOURS) for _ in range(rng.randint(1, MAX_TICKETS))]
    targets = _targets(len(tickets))
    faults = sorted((make_fault(rng.choice(timed_faults()), rng.randint(1, duration // 60), rng.choice(targets), rng.randint(1, 8))
                     for _ in range(rng.randint(0, MAX_FAULTS))), key=lambda f: int(f["at"][:-1]))
    for name in rng.sample(FAILPOINTS, rng.randint(0, 2)):
        faults.append({"fault": "failpoint", "failpoint": name, "hit": rng.randint(1, 3)})
    return {"seed": seed, "duration": duration, "pool_size": rng.randint(1, 4), "tickets": tickets, "faults": faults}


# -- schedule -> scenario -------------------------------------------------------------

def scenario_dict(schedule: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    seed = int(schedule["seed"])
    return {
        "name": name or f"explore-{seed}",
        "description": "a generated fault schedule (chaos/explore.py), held to the standard invariants",
        "mode": "simulated", "seed": seed, "duration": f"{int(schedule['duration'])}s",
        "fleet": {"pool_size": int(schedule["pool_size"]),
                  "tickets": [{"id": f"E-{i}", "behaviour": b} for i, b in enumerate(schedule["tickets"], 1)]},
        "overrides": POLICY, "faults": list(schedule["faults"]), "faults_may_miss": True,  # random aims miss
        "expect": [{"invariant": name} for name in INVARIANTS],
    }


def scenario_from_schedule(schedule: dict[str, Any], name: str | None = None) -> Scenario:
    return Scenario.model_validate(scenario_dict(schedule, name))


def scenario_for_seed(seed: int) -> Scenario:
    return scenario_from_schedule(schedule_for_seed(seed))


def scenario_yaml(schedule: dict[str, Any], name: str | None = None) -> str:
    return yaml.safe_dump(scenario_dict(schedule, name), sort_keys=False, width=120)


def load_schedule(path: str | Path) -> Scenario:
    """`--schedule FILE`: a schedule (JSON or YAML, as printed by a failing exploration) or a whole scenario file."""
    p = Path(path)
    try:
        data = load_one(read_text(read_capped(p))).data  # JSON is YAML: one located line for either
    except FileNotFoundError:
        raise InvalidInput(f"{p}: no such schedule file") from None
    except OSError as e:
        raise InvalidInput(f"{p}: cannot read: {e.strerror or e}") from None
    except YamlProblem as yp:
        x = yp.problem
        raise InvalidInput(f"{p}:{x.line}:{x.col}: {x.path}: {x.message}") from None
    if isinstance(data, dict) and "expect" in data:
        return load(p)
    need = ("seed", "duration", "pool_size", "tickets", "faults")
    if not isinstance(data, dict) or any(k not in data for k in need):
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise InvalidInput(f"{p}: expected a schedule with keys {', '.join(need)}, got {got}")
    try:
        return scenario_from_schedule(data, name=p.stem)
    except ValueError as e:
        raise InvalidInput(f"{p}: not a valid schedule: {str(e).splitlines()[0]}") from None


# -- running --------------------------------------------------------------------------

def run_schedule(schedule: dict[str, Any], workdir: str | Path | None = None) -> engine.Result:
    return engine.run(scenario_from_schedule(schedule), workdir)


def event_log(result: engine.Result) -> list[tuple]:
    """The run's event log, for determinism checks: (offset, kind, subject, payload) with the work folder,
    and the real supervisor process's pid and start time (the executor records them), masked."""
    store = open_store(Path(result.workdir) / "fleet", readonly=True, use_env=False, identity_checks=False)
    try:
        events = store.events()
    finally:
        store.close()
    out = []
    for e in events:
        at, kind, subject = e.at, e.kind, e.subject
        payload = json.dumps(e.payload, sort_keys=True, separators=(",", ":"))  # the stored text, as the store wrote it
        p = json.loads(payload.replace(result.workdir, "<work>"))
        _mask(p)
        out.append((round(at, 6), kind, subject.replace(result.workdir, "<work>"), p))
    return out


def _mask(v: Any) -> None:
    if isinstance(v, dict):
        for k in list(v):
            if k in ("pid", "ctime", "pid_start", "_run") and isinstance(v[k], int | float | str):
                v[k] = "<real>"
            else:
                _mask(v[k])
    elif isinstance(v, list):
        for x in v:
            _mask(x)


@dataclass
class Failure:
    schedule: dict[str, Any]
    result: engine.Result
    tried: int

    @property
    def broken(self) -> list[str]:
        return [c.message for c in self.result.failures] or [self.result.error or self.result.status]

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(scenario_yaml(self.schedule, name=f"explore-{self.schedule['seed']}"))
        return p

    def replay_command(self, path: str | Path) -> str:
        return f"healer gameday replay --seed {self.schedule['seed']} {path}"


def explore(examples: int = 25, seed: int = 0, *, progress=None) -> Failure | None:
    """Search `examples` hypothesis-generated schedules (the search itself seeded by `seed`); the first
    schedule that breaks an invariant, shrunk by hypothesis, or None when every one held."""
    from hypothesis import HealthCheck, Phase, given, settings  # lazy: hypothesis, 130 ms, as above
    from hypothesis import seed as hseed  # lazy: hypothesis, 130 ms, as above

    seen: list[Failure] = []
    count = [0]

    @hseed(seed)
    @settings(max_examples=examples, deadline=None, database=None, print_blob=False, report_multiple_bugs=False,
              phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck))
    @given(schedules())
    def holds(schedule: dict[str, Any]) -> None:
        count[0] += 1
        with tempfile.TemporaryDirectory(prefix="healer-explore-") as d:
            r = run_schedule(schedule, d)
        if progress:
            progress(count[0], schedule, r)
        if not r.ok:
            seen.append(Failure(schedule, r, count[0]))
            raise AssertionError("; ".join(c.message for c in r.failures) or r.error or r.status)

    try:
        holds()
    except AssertionError:
        pass  # hypothesis replays the shrunk example last: it is seen[-1]
    except Exception:  # noqa: BLE001 - hypothesis's own errors (flaky, unsatisfiable) still leave a failure to report
        if not seen:
            raise
    return seen[-1] if seen else None


def explore_seeds(examples: int, seed: int = 0) -> int | None:
    """The seeded variant: schedules `seed .. seed+examples-1`; the first failing seed, or None (no shrinking)."""
    for s in range(seed, seed + examples):
        with tempfile.TemporaryDirectory(prefix="healer-explore-") as d:
            if not engine.run(scenario_for_seed(s), d).ok:
                return s
    return None
