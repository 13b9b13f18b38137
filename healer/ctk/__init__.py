"""Chaos Toolkit interoperability (issue 16).

* `healer.ctk.actions` / `healer.ctk.probes`: healer's faults and probes as a Chaos Toolkit
  extension (python providers), so `chaos run experiment.json` can kill a supervisor, freeze
  dispatch or probe fleet health. Every fault journals its undo in healer's undo journal first.
* `healer.ctk.run`: `healer gameday run experiment.json|yaml` runs a Chaos Toolkit experiment with
  chaostoolkit-lib itself (tolerances, pauses, rollbacks, providers, configuration and secrets are
  Chaos Toolkit's own code), then undoes what healer's faults left and writes healer's reports.

Which fleet: the `root` argument, else `configuration.healer_root`, else `$HEALER_ROOT`
(`healer gameday run --root` sets it), else the fleet around the current folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from chaos.faults.undo import UndoJournal, home
from healer.cli.common import require_fleet

UNDO_ENV = "HEALER_CTK_UNDO"  # the undo-journal folder of the `healer gameday run` driving the experiment


def fleet_root(root: str | None = None, configuration: dict[str, Any] | None = None) -> Path:
    given = root or (configuration or {}).get("healer_root")
    return require_fleet(Path(given) if given else None)


def undo_journal():
    """The journal of the run driving us (`healer gameday run`), else one of our own in the game-day home
    (a bare `chaos run`): `healer gameday clean` undoes it once this process is gone."""
    folder = os.environ.get(UNDO_ENV)
    return UndoJournal(Path(folder) if folder else home() / f"ctk-{os.getpid()}")
