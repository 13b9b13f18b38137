"""CLI: `healer gameday list|run|replay|explore|clean` (docs/chaos.md, README "Commands")."""

from __future__ import annotations

import re
from pathlib import Path

import typer
import yaml
from rich.table import Table

from healer.cli.common import JsonOpt, console, print_json, require_fleet
from healer.errors import STOPPED, UsageError
from healer.files import ensure_folder

gameday_app = typer.Typer(help="Chaos game days: break the fleet on purpose and check that healer heals it.",
                          no_args_is_help=True)


@gameday_app.command("list")
def list_cmd(paths: list[Path] = typer.Argument(None, help="Scenario files or folders (default: the standard suite)."),
             as_json: bool = JsonOpt,
             switches: bool = typer.Option(False, "--switches", help="List the product switches `disable:` may turn off."),
             faults: bool = typer.Option(False, "--faults", help="List the faults a scenario can inject, and in which worlds.")) -> None:
    """List scenarios: name, mode, what each proves (--faults: every fault; --switches: the product switches)."""
    if faults:
        from chaos.faults.worlds import rows  # lazy: pulls pydantic, chaos…: 364 ms of `healer --help`

        if as_json:
            print_json(rows())
            return
        ft = Table("fault", "worlds", "params", "what it does", "undone by")
        for r in rows():
            ft.add_row(r["fault"], ", ".join(r["worlds"]), ", ".join(r["params"]) or "-", r["what"], r["undo"])
        console.print(ft)
        return
    from chaos.runner import load_all  # lazy: pulls pydantic, chaos…: 432 ms of `healer --help`

    scs = load_all([str(p) for p in paths] if paths else None)
    if switches:
        from healer.switches import SWITCHES  # lazy: healer.switches: 1.2 ms of `healer --help`

        if as_json:
            print_json(SWITCHES)
        else:
            for k, v in SWITCHES.items():
                typer.echo(f"{k:<18} {v}")
        return
    if as_json:
        print_json([{"name": s.name, "mode": s.mode, "seed": s.seed, "duration": s.duration, "exercises": s.exercises,
                     "expectations": len(s.expect), "faults": len(s.faults), "source": s.source} for s in scs])
        return
    t = Table("scenario", "mode", "expectations", "proves")
    for col in t.columns:
        col.overflow = "fold"
    for s in scs:
        t.add_row(s.name, s.mode, str(len(s.expect)), s.exercises or s.description.strip().split("\n")[0])
    console.print(t)


def _overrides(items: list[str] | None) -> dict:
    from chaos.scenario import deep_merge, parse_override  # lazy: pulls pydantic, chaos: 155 ms of `healer --help`

    out: dict = {}
    for it in items or []:
        out = deep_merge(out, parse_override(it))
    return out


def _check_outputs(report_dir: Path | None, junit: Path | None) -> None:
    """Refuse unusable output paths before a long game day, not with a traceback after it: the folders are
    made now (a path that cannot be one is exit 64, a host that takes no writes 74)."""
    if junit is not None and (junit.is_dir() or (report_dir is not None and junit.resolve() == report_dir.resolve())):
        raise UsageError(f"--junit {junit}: expected a file name, found a folder")
    if report_dir is not None:
        ensure_folder(report_dir, f"--report {report_dir}")
    if junit is not None:
        ensure_folder(junit.parent, f"--junit {junit}")


def _check_workdir(workdir: Path | None, scs) -> Path | None:
    """`--workdir DIR`: each scenario works in DIR/<name>, which must be new, empty or an earlier game day's
    (moved aside, never emptied: chaos/workdir.py); checked for every scenario before the first runs."""
    if workdir is None:
        return None
    from chaos.workdir import problem  # lazy: pulls chaos, psutil: 17 ms of `healer --help`

    if workdir.exists() and not workdir.is_dir():
        raise UsageError(f"--workdir {workdir}: expected a folder, found a file")
    for sc in scs:
        why = problem(workdir / sc.name)
        if why:
            raise UsageError(f"--workdir {workdir}: {why}")
    return workdir.resolve()


def _against_fleet(scs, root: Path, report_dir, junit, quiet: bool) -> int:
    """Scenarios whose faults act on your fleet (chaos/engine/fleet.py): no fleet built, none thrown away."""
    from chaos.engine.fleet import FleetEngine, refuse_unsupported  # lazy: pulls pydantic, chaos…: 454 ms of `healer --help`
    from chaos.runner import outcome  # lazy: pulls pydantic, chaos…: 434 ms of `healer --help`

    target = require_fleet(root)
    for sc in scs:
        refuse_unsupported(sc)  # every scenario checked before the first fault touches the fleet
    results = []
    for sc in scs:
        if not quiet:
            console.print(f"{sc.name}: against {target}", highlight=False)
        results.append(FleetEngine(sc, target).run())
    code, _ = outcome(results, report_dir, junit, console)
    return code


def _experiments(paths: list[Path]) -> bool:
    """True when every path is a Chaos Toolkit experiment; a mix with healer scenarios is a usage error."""
    from healer.ctk.run import is_experiment  # lazy: pulls chaos, chaoslib…: 107 ms of `healer --help`

    flags = [is_experiment(p) for p in paths]
    if any(flags) and not all(flags):
        raise UsageError("gameday: expected healer scenarios or Chaos Toolkit experiments, got both; give them separately")
    return all(flags)


@gameday_app.command("run")
def run_cmd(
    paths: list[Path] = typer.Argument(None, help="Scenario files or folders (default: chaos/scenarios)."),
    report_dir: Path = typer.Option(None, "--report", help="Write journal.json and report.md here."),
    junit: Path = typer.Option(None, "--junit", help="Write JUnit XML here."),
    seed: int = typer.Option(None, "--seed", help="Override every scenario's seed."),
    override: list[str] = typer.Option(None, "--override", "-o", help="Policy override key.path=value (repeatable)."),
    disable: bool = typer.Option(False, "--disable", help="Apply each scenario's `disable:` override (expect failures)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live progress."),
    workdir: Path = typer.Option(None, "--workdir", help="Keep each scenario's fleet under this folder."),
    root: Path = typer.Option(None, "--root", help="Run against this existing fleet: scenarios' faults act on it (no "
                                                  "fleet built); Chaos Toolkit experiments get HEALER_ROOT."),
    keep: bool = typer.Option(False, "--keep", help="Keep each scenario's temp work folder (printed); "
                                                   "by default a run removes it."),
) -> None:
    """Run scenarios or Chaos Toolkit experiments (.json/.yaml with title and method); exit 0 when every
    expectation (steady state) holds, 1 otherwise."""
    from chaos.runner import interrupted, outcome, run_all  # lazy: pulls pydantic, chaos…: 439 ms of `healer --help`

    _check_outputs(report_dir, junit)
    if paths and _experiments(paths):
        from healer.ctk import run as ctk  # lazy: pulls chaos, chaoslib…: 108 ms of `healer --help`

        ignored = [flag for flag, given in (("--disable", disable), ("--seed", seed is not None), ("--override", bool(override)),
                                            ("--workdir", workdir is not None), ("--keep", keep)) if given]
        if ignored:  # an experiment has no `disable:`, seed or healer policy: a flag it would drop is refused, not ignored
            raise UsageError(f"{', '.join(ignored)}: not for a Chaos Toolkit experiment (it has no disable:, seed, "
                             "policy or work folder of healer's); run it without")

        target = root.resolve() if root else None
        if target is not None and not (target / ".healer").is_dir():
            raise UsageError(f"--root {root}: not a healer fleet (no .healer/); run 'healer init' there first")
        exps, _ = _load(paths, target)  # every experiment valid before any runs, as `gameday validate` checks them
        raise typer.Exit(ctk.run([p for p, _ in exps], root=target, report_dir=report_dir, junit=junit, console=console,
                                 live=not quiet))
    _, scs = _load(paths)
    if disable:
        bare = [s.name for s in scs if not s.disable]
        if bare:
            raise UsageError(f"--disable: {', '.join(bare)} has no `disable:` (nothing to switch off)")
    if root is not None:
        raise typer.Exit(_against_fleet(scs, root, report_dir, junit, quiet))
    mine = [s.source or s.name for s in scs if s.for_root]
    if mine:  # a game day for your fleet builds none: without --root it has nothing to act on
        raise UsageError(f"{mine[0]}: meant for your own fleet (for_root: true); run it with --root FLEET")
    extra = _overrides(override)
    if extra:  # a bad --override is bad input (65), not a game day that failed (1)
        for sc in scs:
            sc.effective_policy(extra, disabled=disable)
    workroot = _check_workdir(workdir, scs)
    results = run_all(scs, seed=seed, disabled=disable, overrides=extra, live=not quiet, workroot=workroot, keep=keep)
    code, _ = outcome(results, report_dir, junit, console)
    if interrupted(results):  # Ctrl-C: the report above is partial (what ran, and where it stopped): exit 4
        done = sum(not r.stats.get("interrupted") for r in results)
        typer.echo(f"healer gameday: interrupted: a partial report of {done} finished scenario(s) of {len(scs)}", err=True)
        raise typer.Exit(STOPPED)
    if disable:  # did each fail for the right reason? (exit 1 either way: expectations broke)
        for r in results:
            broken, want = {c.name for c in r.failures}, set(r.scenario.disable_breaks)
            verdict = ("broke exactly its disable_breaks" if r.scenario.broke_as_declared(broken) else
                       f"broke {sorted(broken)}, disable_breaks names {sorted(want)}" if want else "declares no disable_breaks")
            incident = [c for c in r.incident if not c.ok]
            typer.echo(f"disabled {r.scenario.name}: {verdict}" + (f"; incident not shown: {incident[0].message}" if incident else ""))
    raise typer.Exit(code)


def _selection(paths: list[Path] | None):
    """The scenarios named (files, folders, names), validated; none at all is a usage error (64), not a pass."""
    from chaos.runner import load_all  # lazy: pulls pydantic, chaos…: 445 ms of `healer --help`

    scs = load_all([str(p) for p in paths] if paths else None)
    if not scs:
        where = ", ".join(str(p) for p in paths) if paths else "chaos/scenarios"
        raise UsageError(f"no scenario in {where} (expected *.yaml scenario files)")
    for sc in scs:
        for w in sc.warnings:
            typer.echo(w, err=True)
    return scs


def _load(paths: list[Path] | None, root: Path | None = None) -> tuple[list[tuple[Path, dict]], list]:
    """The one loader of `gameday run` and `gameday validate`: (Chaos Toolkit experiments, healer scenarios), one
    of them empty; a mix of both is a usage error. What one accepts, the other does (issue 34)."""
    if paths and _experiments(paths):
        from healer.ctk.run import load_all  # lazy: pulls chaos, chaoslib…: 103 ms of `healer --help`

        return load_all(list(paths), root), []
    return [], _selection(paths)


@gameday_app.command("validate")
def validate_cmd(paths: list[Path] = typer.Argument(..., help="Scenario files or folders, or Chaos Toolkit experiments."),
                 root: Path = typer.Option(None, "--root", help="Chaos Toolkit experiments: the fleet `gameday run --root` "
                                                               "would aim at ($HEALER_ROOT for their configuration).")) -> None:
    """Check scenario files or Chaos Toolkit experiments without running them (the loader `gameday run` uses):
    exit 0 when valid, 65 with one FILE:LINE:COL line per problem."""
    exps, scs = _load(paths, root.resolve() if root else None)
    if scs and root is not None:
        raise UsageError("--root: only for Chaos Toolkit experiments (a scenario builds its own fleet); validate without it")
    for path, exp in exps:
        ss = exp.get("steady-state-hypothesis") or {}
        typer.echo(f"{path}: ok (Chaos Toolkit experiment {exp.get('title')!r}, {len(ss.get('probes') or [])} steady-state "
                   f"probe(s), {len(exp.get('method') or [])} method activit{'y' if len(exp.get('method') or []) == 1 else 'ies'}, "
                   f"{len(exp.get('rollbacks') or [])} rollback(s))")
    for sc in scs:
        typer.echo(f"{sc.source}: ok ({sc.name}, {sc.mode}, {len(sc.expect)} expectation(s)"
                   + (f", disable breaks {len(sc.disable_breaks)}" if sc.disable_breaks else "") + ")")


@gameday_app.command("new")
def new_cmd(name: str = typer.Argument(..., help="Scenario name (letters, digits, dashes)."),
            out: Path = typer.Option(None, "--out", help="Where to write it (default: ./NAME.yaml)."),
            force: bool = typer.Option(False, "--force", help="Overwrite an existing file.")) -> None:
    """Write a commented scenario skeleton that validates and runs (edit it, then `healer gameday validate`)."""
    from chaos.scenario import skeleton  # lazy: pulls pydantic, chaos: 144 ms of `healer --help`

    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
        raise UsageError(f"gameday new {name!r}: expected a name of lower-case letters, digits and dashes")

    path = out or Path(f"{name}.yaml")
    if path.is_dir():
        path = path / f"{name}.yaml"
    if path.exists() and not force:
        raise UsageError(f"{path} already exists (--force to overwrite)")
    if path.is_dir():
        raise UsageError(f"--out {out}: {path} is a folder")
    ensure_folder(path.parent, f"--out {out}")
    path.write_text(skeleton(name))
    typer.echo(f"wrote {path}; check it with: healer gameday validate {path}")


@gameday_app.command("replay")
def replay_cmd(
    seed: int = typer.Option(None, "--seed", help="The seed printed by a failing run or exploration."),
    scenario: Path = typer.Argument(None, help="A scenario (or a failing schedule written by `explore`) to replay with that seed; "
                                               "without one, the generated schedule of that seed."),
    schedule: Path = typer.Option(None, "--schedule", help="A schedule file (JSON or YAML) printed by a failing exploration."),
    report_dir: Path = typer.Option(None, "--report"),
    show: bool = typer.Option(False, "--show", help="Print the scenario (YAML) before running it."),
    workdir: Path = typer.Option(None, "--workdir", help="Keep the replayed fleet under this folder."),
) -> None:
    """Re-run a scenario, or a generated fault schedule, deterministically from its seed."""
    from chaos.runner import outcome, run_all  # lazy: pulls pydantic, chaos…: 445 ms of `healer --help`

    if scenario is not None and schedule is not None:
        raise UsageError("replay: expected a SCENARIO or --schedule FILE, got both")
    if scenario is not None:
        from chaos.scenario import discover, load  # lazy: pulls pydantic, chaos: 143 ms of `healer --help`

        if not scenario.exists():  # a scenario name (`zombie-ticket`), as `gameday run` takes it
            found = discover([str(scenario)])
            scenario = found[0] if len(found) == 1 else scenario
        sc = load(scenario)
    elif schedule is not None:
        from chaos.explore import load_schedule  # lazy: pulls pydantic, chaos…: 414 ms of `healer --help`

        sc = load_schedule(schedule)
    elif seed is not None:
        from chaos.explore import scenario_for_seed  # lazy: pulls pydantic, chaos…: 412 ms of `healer --help`

        sc = scenario_for_seed(seed)
    else:
        raise UsageError("replay: expected --seed N, a SCENARIO or --schedule FILE, got none")
    if show:
        typer.echo(yaml.safe_dump(sc.model_dump(mode="json", exclude_defaults=True), sort_keys=False), err=True)
    _check_outputs(report_dir, None)
    results = run_all([sc], seed=seed, live=False, workroot=_check_workdir(workdir, [sc]))
    code, _ = outcome(results, report_dir, None, console)
    raise typer.Exit(code)


@gameday_app.command("explore")
def explore_cmd(
    examples: int = typer.Option(25, "--examples", "-n", min=1, help="How many generated schedules to try."),
    seed: int = typer.Option(0, "--seed", help="Seed of the exploration itself (the same seed searches the same schedules)."),
    out: Path = typer.Option(None, "--out", help="Where to write a failing schedule (default: ./gameday-explore-SEED.yaml)."),
    seeded: bool = typer.Option(False, "--seeded", help="Try the seeded schedules SEED..SEED+N-1 instead (no shrinking)."),
) -> None:
    """Generate fault schedules (hypothesis) against the simulated engine; shrink and save any failure."""
    from chaos import explore  # lazy: pulls pydantic, chaos…: 424 ms of `healer --help`

    if out is not None:  # where a failure goes is checked before the search, not after it
        if out.is_dir():
            raise UsageError(f"--out {out}: expected a file name, found a folder")
        ensure_folder(out.parent, f"--out {out}")

    if seeded:
        failing = explore.explore_seeds(examples, seed)
        if failing is None:
            console.print(f"{examples} seeded schedules ({seed}..{seed + examples - 1}): every invariant held")
            raise typer.Exit(0)
        console.print(f"[red]invariant broken[/] - reproduce with: healer gameday replay --seed {failing}")
        raise typer.Exit(1)

    def tick(n: int, schedule: dict, r) -> None:
        mark = "[green]ok[/]" if r.ok else "[red]broken[/]"
        console.print(f"  #{n:<3} {mark} {len(schedule['tickets'])} ticket(s), {len(schedule['faults'])} fault(s), "
                      f"seed {schedule['seed']}", highlight=False)

    failure = explore.explore(examples, seed, progress=tick)
    if failure is None:
        console.print(f"{examples} generated schedules: every invariant held ({', '.join(explore.INVARIANTS)})")
        raise typer.Exit(0)
    path = failure.write(out or Path(f"gameday-explore-{failure.schedule['seed']}.yaml"))
    console.print("[red]invariant broken[/] by this schedule (shrunk by hypothesis):")
    for line in failure.broken:
        console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
    console.print(explore.scenario_yaml(failure.schedule), highlight=False, markup=False, soft_wrap=True)
    console.print(f"written to {path}; reproduce with: {failure.replay_command(path)}", highlight=False, markup=False,
                  soft_wrap=True)
    raise typer.Exit(1)


@gameday_app.command("clean")
def clean_cmd(as_json: bool = JsonOpt) -> None:
    """Undo what killed game days left behind (stopped processes, fleet processes, lock files, moved worktrees),
    then remove their run and work folders."""
    from chaos.faults.undo import clean  # lazy: pulls chaos, psutil: 13 ms of `healer --help`

    lines = clean()
    if as_json:
        print_json(lines)
    else:
        typer.echo("\n".join(lines) if lines else "nothing left behind")


def register(app: typer.Typer) -> None:
    app.add_typer(gameday_app, name="gameday")
