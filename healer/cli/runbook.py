"""CLI: healer runbook check|new. Also the file reading the shell uses for `include_runbooks`."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from healer import errors
from healer.cli.common import err_console

runbook_app = typer.Typer(help="Runbooks as policy: Markdown with a rule in its YAML front matter.", no_args_is_help=True)

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def read_texts(paths: list[str | Path], base: str | Path | None = None) -> list[tuple[str, str]]:
    """(source, text) for every runbook under `paths` (folders: their *.md, sorted by name).

    Relative paths are taken from `base` (the fleet root). An unreadable path is one clear error (65).
    """
    out: list[tuple[str, str]] = []
    for raw in paths:
        p = Path(raw)
        if not p.is_absolute() and base is not None:
            p = Path(base) / p
        if p.is_dir():
            files = sorted(f for f in p.glob("*.md") if f.is_file() and f.name.lower() != "readme.md")
        elif p.is_file():
            files = [p]
        else:
            raise errors.InvalidInput(f"{raw}: no such runbook file or folder")
        for f in files:
            try:
                out.append((str(f), f.read_bytes().decode("utf-8-sig")))
            except UnicodeDecodeError:
                raise errors.InvalidInput(f"{f}:1:1: (file): expected UTF-8 text, got undecodable bytes") from None
            except OSError as e:
                raise errors.InvalidInput(f"{f}: cannot read: {e.strerror}") from None
    return out


def policy_with_runbooks(policy, root: str | Path):
    """The policy in force: `include_runbooks` read from `root` and turned into rules (InvalidInput on any problem)."""
    from healer.core.runbooks import rules_from_runbooks, with_rules

    if not policy.include_runbooks:
        return policy
    rules, problems = rules_from_runbooks(read_texts(list(policy.include_runbooks), root))
    if problems:
        raise errors.InvalidInput(problems[0], problems)
    return with_rules(policy, rules)


@runbook_app.command("check")
def check(paths: list[Path] = typer.Argument(None, help="Runbook files or folders (default: runbooks/).")) -> None:
    """Validate every runbook: front matter (a rule) and prose sections. Exit 65 with located lines on problems."""
    from healer.core.runbooks import check as check_texts

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
    from healer.core.runbooks import template
    from healer.policy.schema import FINDINGS

    if not _NAME.match(name):
        raise errors.UsageError(f"{name!r}: expected a name of lowercase letters, digits and dashes (e.g. requeue-frozen)")
    if when not in FINDINGS:
        raise errors.UsageError(f"--when: expected one of {', '.join(FINDINGS)}, got {when!r}")
    from healer.files import ensure_folder

    target = folder / f"{name}.md"
    if target.exists():
        raise errors.UsageError(f"{target}: already exists; choose another name or edit it")
    ensure_folder(folder, f"--dir {folder}")
    target.write_text(template(name, when))
    typer.echo(str(target))


def register(app: typer.Typer) -> None:
    app.add_typer(runbook_app, name="runbook")
