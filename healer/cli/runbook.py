"""CLI: runbook commands (see SPEC §12)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    pass
