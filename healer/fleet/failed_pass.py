"""A daemon's pass that failed (the dispatcher's, the supervisor's): one line and one event, the next pass retries.

A lost store (deleted, replaced, read-only) ends the daemon instead (StoreLost); a store that is away for a
while is an outage (healer/store/outage.py), noted once per outage rather than once per pass.
"""

from __future__ import annotations

from loguru import logger

from healer.errors import StoreLost, host_trouble
from healer.store import outage
from healer.store.corrupt import corrupt


def raise_if_lost(store) -> None:
    """StoreLost when the store was deleted, replaced or made read-only during a pass that failed: that
    explains the failure, and the daemon ends with its one line instead of first logging a failed pass
    (into log files that may have gone with the store's folder). Any other answer lets the pass be reported."""

    try:
        store.check()
    except StoreLost:
        raise
    except Exception:  # noqa: BLE001 - the store could not say: the failed pass is reported as before
        pass


def host_trouble_or_corrupt(e: BaseException) -> bool:
    """A full disk (its own line and finding) or a damaged store (the daemon ends) is not an outage to ride out."""

    return host_trouble(e) or corrupt(e)


def report_failed_pass(store, who: str, e: BaseException) -> None:
    """One line on stderr and, if the store takes it, one `<who>.error` event; never raises. The store being
    away (healer/store/outage.py) is noted instead: one line per outage, not one per failed pass."""


    if outage.unavailable(e) and not host_trouble_or_corrupt(e):
        outage.note(store, e, tried=False)
        return

    line = f"{who} pass failed ({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else '-'}); retrying next pass"
    try:
        logger.error(line)
    except Exception:  # noqa: BLE001 - logging must not end the daemon either
        pass
    try:
        store.append(f"{who}.error", who, {"error": f"{type(e).__name__}: {e}"[:2000]})
    except Exception:  # noqa: BLE001 - a full disk refuses the event too; the line above told the story
        pass
