"""Run a list of scenarios with live progress, then report. Used by `healer gameday run`, `healer demo` and pytest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from chaos import engine, report
from chaos.faults import undo
from chaos.scenario import Scenario, discover, load


def load_all(paths: list[str | Path] | None) -> list[Scenario]:
    return [load(p) for p in discover(paths)]


def run_all(scenarios: list[Scenario], *, seed: int | None = None, disabled: bool = False, overrides: dict | None = None,
            console: Console | None = None, live: bool = True, workroot: Path | None = None) -> list[engine.Result]:
    from healer.cli.common import make_console

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
            r = engine.run(sc, wd, seed=seed, disabled=disabled, overrides=overrides, progress=tick)
            results.append(r)
            status = "[green]PASS[/]" if r.ok else f"[red]{r.status.upper()}[/]"
            prog.update(task, completed=1.0, status=status)
    return results


def outcome(results: list[engine.Result], report_dir: Any = None, junit_file: Any = None,
            console: Console | None = None) -> tuple[int, dict[str, Path]]:
    from healer.cli.common import make_console

    console = console or make_console()
    written = report.write(results, report_dir, junit_file)
    report.print_summary(results, console)
    for name, path in written.items():
        console.print(f"{name}: {path}")
    return (0 if all(r.ok for r in results) else 1), written
