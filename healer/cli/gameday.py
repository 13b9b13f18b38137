"""CLI: `healer gameday list|run|replay|explore|clean` (SPEC §9, §12)."""

from __future__ import annotations

from pathlib import Path

import typer

from healer.cli.common import JsonOpt, console, print_json

gameday_app = typer.Typer(help="Chaos game days: break the fleet on purpose and check that healer heals it.",
                          no_args_is_help=True)


@gameday_app.command("list")
def list_cmd(paths: list[Path] = typer.Argument(None, help="Scenario files or folders (default: the standard suite)."),
             as_json: bool = JsonOpt) -> None:
    """List scenarios: name, mode, what each proves."""
    from rich.table import Table

    from chaos.runner import load_all

    scs = load_all([str(p) for p in paths] if paths else None)
    if as_json:
        print_json([{"name": s.name, "mode": s.mode, "seed": s.seed, "duration": s.duration, "exercises": s.exercises,
                     "expectations": len(s.expect), "faults": len(s.faults), "source": s.source} for s in scs])
        return
    t = Table("scenario", "mode", "expectations", "proves")
    for s in scs:
        t.add_row(s.name, s.mode, str(len(s.expect)), s.exercises or s.description.strip().split("\n")[0])
    console.print(t)


def _overrides(items: list[str] | None) -> dict:
    from chaos.scenario import deep_merge, parse_override

    out: dict = {}
    for it in items or []:
        out = deep_merge(out, parse_override(it))
    return out


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
) -> None:
    """Run scenarios; exit 0 when every expectation holds, 1 otherwise."""
    from chaos.runner import load_all, outcome, run_all

    scs = load_all([str(p) for p in paths] if paths else None)
    results = run_all(scs, seed=seed, disabled=disable, overrides=_overrides(override), live=not quiet,
                      workroot=workdir.resolve() if workdir else None)
    code, _ = outcome(results, report_dir, junit, console)
    raise typer.Exit(code)


@gameday_app.command("replay")
def replay_cmd(
    seed: int = typer.Option(..., "--seed", help="The seed printed by a failing run or exploration."),
    scenario: Path = typer.Argument(None, help="A scenario to replay with that seed; without one, the explored schedule of that seed."),
    report_dir: Path = typer.Option(None, "--report"),
) -> None:
    """Re-run a scenario (or a hypothesis-generated fault schedule) deterministically from a seed."""
    from chaos.runner import outcome, run_all

    if scenario is not None:
        from chaos.scenario import load

        scs = [load(scenario)]
    else:
        from chaos.explore import scenario_for_seed

        scs = [scenario_for_seed(seed)]
    results = run_all(scs, seed=seed, live=False)
    code, _ = outcome(results, report_dir, None, console)
    raise typer.Exit(code)


@gameday_app.command("explore")
def explore_cmd(
    examples: int = typer.Option(25, "--examples", "-n", help="How many generated schedules to try."),
    seed: int = typer.Option(0, "--seed", help="Seed of the exploration itself."),
) -> None:
    """Generate fault schedules (hypothesis) against the simulated engine; print the seed of any failure."""
    from chaos.explore import explore

    failing = explore(examples, seed)
    if failing is None:
        console.print(f"{examples} generated schedules: every invariant held")
        raise typer.Exit(0)
    console.print(f"[red]invariant broken[/] — reproduce with: healer gameday replay --seed {failing}")
    raise typer.Exit(1)


@gameday_app.command("clean")
def clean_cmd(as_json: bool = JsonOpt) -> None:
    """Undo what a killed game day left behind (stopped processes, fleet processes, lock files, moved worktrees)."""
    from chaos.faults.undo import recover_leftovers

    lines = recover_leftovers()
    if as_json:
        print_json(lines)
    else:
        typer.echo("\n".join(lines) if lines else "nothing left behind")


def register(app: typer.Typer) -> None:
    app.add_typer(gameday_app, name="gameday")
