"""`healer gameday run experiment.json|yaml`: a Chaos Toolkit experiment run by chaostoolkit-lib itself.

chaostoolkit-lib does the experiment (steady-state hypothesis and its tolerances before and after,
method, pauses, rollbacks, process/python/http providers, configuration and secrets from env);
healer adds what a game day needs around it: the fleet to aim at (`--root` → `$HEALER_ROOT`), an undo
journal its own faults (`healer.ctk.actions`) write to before acting, undone at the end whatever the
experiment's rollbacks did, and its reports (journal.json as Chaos Toolkit writes it, report.md,
report.html, JUnit).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from chaoslib.exceptions import ChaosException
from chaoslib.experiment import ensure_experiment_is_valid, run_experiment

from chaos import report_ctk
from chaos.ctk_journal import errors, not_steady, ok, verdict  # noqa: F401 - the verdict of a run, re-exported
from chaos.faults.undo import UndoJournal, home
from healer.ctk import UNDO_ENV
from healer.errors import InvalidInput
from healer.policy.yamlpos import YamlProblem, load_data, load_path

CTK_KEYS = {"title", "method"}


def is_experiment(path: str | Path) -> bool:
    """A Chaos Toolkit experiment file (a mapping with `title` and `method`), not a healer scenario."""
    p = Path(path)
    if not p.is_file() or p.suffix.lower() not in (".json", ".yaml", ".yml"):
        return False
    try:
        data = load_path(p).data
    except OSError:
        return False
    except YamlProblem:
        return p.suffix.lower() == ".json"  # a broken .json is reported by load (a broken .yaml by the scenario loader)
    return isinstance(data, dict) and CTK_KEYS <= set(data) and "expect" not in data


def load(path: str | Path) -> dict[str, Any]:
    """Read through healer's guarded loader (chaostoolkit-lib's own is an unbounded yaml.safe_load: an alias bomb
    took 111 s to a MemoryError), then validated by chaostoolkit-lib."""
    exp = load_data(path, "experiment file")
    if not isinstance(exp, dict):
        raise InvalidInput(f"{path}: invalid Chaos Toolkit experiment: expected a mapping with title and method, got "
                           f"{'an empty document' if exp is None else type(exp).__name__}")
    try:
        ensure_experiment_is_valid(exp)
    except ChaosException as e:
        raise InvalidInput(f"{path}: invalid Chaos Toolkit experiment: {e}") from None
    return exp


def load_all(paths: list[Path], root: Path | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """Every experiment of the selection, validated by chaostoolkit-lib before any runs (every bad file reported,
    one line each): the one loader of `healer gameday run` and `healer gameday validate`. Validation reads the
    experiment's configuration from the environment, with $HEALER_ROOT set from `root` as a run sets it."""
    out, lines = [], []
    for p in paths:
        try:
            with _env(HEALER_ROOT=str(root) if root else None):
                out.append((Path(p), load(p)))
        except InvalidInput as e:
            lines += e.lines or [str(e)]
    if lines:
        raise InvalidInput(lines[0], lines)
    return out


@contextmanager
def _env(**values: str | None):
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is not None:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def _ctk_logging(live: bool):
    """Chaos Toolkit's own progress lines (logger `chaostoolkit`) on stderr, as `chaos run` shows them."""
    log = logging.getLogger("chaostoolkit")
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("[%(asctime)s %(levelname)s] %(message)s", "%Y-%m-%d %H:%M:%S"))
    old_level = log.level
    if live:
        log.addHandler(h)
        log.setLevel(logging.INFO)
    try:
        yield
    finally:
        if live:
            log.removeHandler(h)
        log.setLevel(old_level)


def run_one(path: str | Path, *, root: Path | None = None, live: bool = True) -> dict[str, Any]:
    """Run one experiment; the journal chaostoolkit-lib returns, plus `healer.undo` (what healer undid)."""
    with _env(HEALER_ROOT=str(root) if root else None):
        exp = load(path)
    folder = home() / f"ctk-{os.getpid()}-{Path(path).stem}"
    undo = UndoJournal(folder)
    try:
        with _env(HEALER_ROOT=str(root) if root else None, **{UNDO_ENV: str(folder)}), _ctk_logging(live):
            # rollbacks always run: a game day leaves the target as it found it, deviated or not
            journal = run_experiment(exp, settings={"runtime": {"rollbacks": {"strategy": "always"}}})
    finally:
        undone = undo.undo_all()
        undo.finish()
    journal = json.loads(json.dumps(journal, default=str))  # chaoslib may hold datetimes, exceptions
    journal["healer"] = {"source": str(path), "root": str(root) if root else None,
                         "undo": [{"kind": u.kind, "data": u.data, "result": what} for u, what in undone]}
    errs = errors(journal)
    if errs:  # chaostoolkit-lib calls a run whose action failed `completed`: healer calls it errored, with the reasons
        journal["healer"].update({"status": "errored", "errors": errs})
    return journal


def run(paths: list[Path], *, root: Path | None, report_dir: Path | None, junit: Path | None, console, live: bool) -> int:
    journals = []
    with _env(HEALER_ROOT=str(root) if root else None):  # configuration may read it (`type: env`) at validation
        for p in paths:
            load(p)  # every file checked before the first runs: a typo in the third is exit 65 now, not later
    for p in paths:
        j = run_one(p, root=root, live=live)
        journals.append(j)
        mark = "[green]PASS[/]" if ok(j) else f"[red]{verdict(j)}[/]"
        console.print(f"{mark} {j['experiment'].get('title')} ({p}) in {report_ctk.human_seconds(j.get('duration', 0))}",
                      highlight=False)
        for line in errors(j):
            console.print(f"  error: {line}", highlight=False, markup=False)
        why = not_steady(j)
        if why:
            console.print(f"  {why}", highlight=False, markup=False, soft_wrap=True)
        for u in j["healer"]["undo"]:
            console.print(f"  undone: {u['kind']}: {u['result']}", highlight=False, markup=False)
    for name, path in report_ctk.write(journals, report_dir, junit).items():
        console.print(f"{name}: {path}", highlight=False)
    return 0 if all(ok(j) for j in journals) else 1
