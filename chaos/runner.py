"""Run a list of scenarios with live progress, then report. Used by `healer gameday run`, `healer demo` and pytest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from chaos import engine, report
from chaos.faults import undo
from chaos.scenario import Scenario, discover, load
from healer.errors import InvalidInput
from healer.terminal import make_console


def load_all(paths: list[str | Path] | None) -> list[Scenario]:
    """Every scenario of the selection, all validated before any runs (every problem of every file reported)."""
    scs, lines = [], []
    for p in discover(paths):
        try:
            scs.append(load(p))
        except InvalidInput as e:
            lines += e.lines or [str(e)]
    if lines:
        raise InvalidInput(lines[0], lines)
    return scs


def run_all(scenarios: list[Scenario], *, seed: int | None = None, disabled: bool = False, overrides: dict | None = None,
            console: Console | None = None, live: bool = True, workroot: Path | None = None,
            keep: bool = False) -> list[engine.Result]:
    """Run each scenario in a work folder of its own: under `workroot` (kept), else a temp folder removed at
    the end unless `keep` (then its place is printed)."""
    console = console or make_console(stderr=True)
    recovered = undo.recover_leftovers()
    for line in recovered:
        console.print(f"[yellow]undid a leftover of a killed game day:[/] {line}")
    results: list[engine.Result] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                  console=console, disable=not live, transient=False) as prog:
        for sc in scenarios:
            task = prog.add_task(f"{sc.name:<28}", total=1.0, status=sc.mode)

            def tick(frac: float, task=task) -> None:
                prog.update(task, completed=min(1.0, frac))

            wd = (workroot / sc.name) if workroot else None
            try:
                r = engine.run(sc, wd, seed=seed, disabled=disabled, overrides=overrides, progress=tick,
                               keep=True if wd is not None else keep)
            except KeyboardInterrupt:
                # Ctrl-C: engine.run has undone this scenario's faults; what ran so far is still reported (a partial
                # report, then exit 4), the interrupted scenario an error that says so, the rest not run
                r = engine.Result(sc, "error", error="interrupted (Ctrl-C) before it finished: its faults were undone, "
                                  "its expectations not judged", seed=sc.seed if seed is None else seed, disabled=disabled)
                r.stats["interrupted"] = True
                r.kept = False
                results.append(r)
                prog.update(task, completed=1.0, status="[red]INTERRUPTED[/]")
                break
            results.append(r)
            if r.moved_aside:
                console.print(f"moved the earlier game day's folder {r.workdir} aside to {r.moved_aside}", markup=False,
                              highlight=False, soft_wrap=True)
            status = "[green]PASS[/]" if r.ok else f"[red]{r.status.upper()}[/]"
            prog.update(task, completed=1.0, status=status)
    undo.drop_home_if_empty()  # recover_leftovers() made it; nothing of ours is left in it
    for r in results:
        if r.kept and keep:
            console.print(f"kept {r.scenario.name}'s work folder: {r.workdir}", markup=False, highlight=False, soft_wrap=True)
    return results


def interrupted(results: list[engine.Result]) -> bool:
    return any(r.stats.get("interrupted") for r in results)


def outcome(results: list[engine.Result], report_dir: Any = None, junit_file: Any = None,
            console: Console | None = None) -> tuple[int, dict[str, Path]]:
    console = console or make_console()
    written = report.write(results, report_dir, junit_file)
    report.print_summary(results, console, written.get("markdown"))
    for name, path in written.items():
        console.print(f"{name}: {path}")
    return (0 if all(r.ok for r in results) else 1), written
