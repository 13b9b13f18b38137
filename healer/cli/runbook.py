"""CLI: healer runbook check|new. The file reading the shell uses for `include_runbooks` is in healer/cli/common.py."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from healer import errors
from healer.cli.common import err_console, read_texts
from healer.files import ensure_folder

runbook_app = typer.Typer(help="Runbooks as policy: Markdown with a rule in its YAML front matter.", no_args_is_help=True)

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


@runbook_app.command("check")
def check(paths: list[Path] = typer.Argument(None, help="Runbook files or folders (default: runbooks/).")) -> None:
    """Validate every runbook: front matter (a rule) and prose sections. Exit 65 with located lines on problems."""
    from healer.core.runbooks import check as check_texts  # lazy: pulls pydantic, networkx: 258 ms of `healer --help`

    targets = list(paths or [Path("runbooks")])
    texts = read_texts(targets)
    if not texts:
        raise errors.InvalidInput(f"{', '.join(map(str, targets))}: no runbooks (*.md) found")
    problems = check_texts(texts)
    if problems:
        for line in problems:
            err_console.print(line, markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(errors.INVALID_INPUT)
    typer.echo(f"{len(texts)} runbook(s) ok")


@runbook_app.command("new")
def new(
    name: str = typer.Argument(..., help="Runbook name, also its rule id (lowercase, digits, dashes)."),
    when: str = typer.Option("frozen_in_progress", "--when", help="The finding kind the rule answers."),
    folder: Path = typer.Option(Path("runbooks"), "--dir", help="Where to write NAME.md."),
) -> None:
    """Write a runbook template that `healer runbook check` accepts."""
    from healer.core.runbooks import template  # lazy: pulls pydantic, networkx: 252 ms of `healer --help`
    from healer.policy.schema import FINDINGS  # lazy: pulls pydantic: 113 ms of `healer --help`

    if not _NAME.match(name):
        raise errors.UsageError(f"{name!r}: expected a name of lowercase letters, digits and dashes (e.g. requeue-frozen)")
    if when not in FINDINGS:
        raise errors.UsageError(f"--when: expected one of {', '.join(FINDINGS)}, got {when!r}")

    target = folder / f"{name}.md"
    if target.exists():
        raise errors.UsageError(f"{target}: already exists; choose another name or edit it")
    ensure_folder(folder, f"--dir {folder}")
    target.write_text(template(name, when))
    typer.echo(str(target))


def register(app: typer.Typer) -> None:
    app.add_typer(runbook_app, name="runbook")
