"""Names of the store's settings: kept here for old imports; the one list is healer/conventions.py."""

from healer.conventions import (  # noqa: F401 - re-exported
    DISPATCH_CRASHED,
    DISPATCH_CYCLES,
    DISPATCH_LAST_LAUNCH,
    DISPATCH_LAST_TICK,
    DISPATCH_PAUSED,
    DISPATCH_PAUSED_BY,
    DISPATCH_PAUSED_REASON,
    MAIN_CHECKED,
    MAIN_RED_SINCE,
    MAIN_STATUS,
    SUPERVISOR_LAST_TICK,
    SUPERVISOR_MEMORY,
)
