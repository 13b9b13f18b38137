"""Names of the store's settings (`get_setting`/`set_setting`) that more than one module
reads or writes: the dispatcher writes them, the supervisor's snapshot, the remedies,
`healer status` and the game-day engines read them. One spelling, so a typo cannot
silently blind a reader."""

DISPATCH_PAUSED = "dispatch.paused"
DISPATCH_PAUSED_REASON = "dispatch.paused_reason"  # "main_red" (the dispatcher's) or the remedy's PAUSED_BY_HEALER
DISPATCH_PAUSED_BY = "dispatch.paused_by"  # who paused it, when, why (pause_dispatch)
DISPATCH_LAST_LAUNCH = "dispatch.last_launch_at"
DISPATCH_LAST_TICK = "dispatch.last_tick_at"
DISPATCH_CYCLES = "dispatch.cycles"
MAIN_STATUS = "main.status"  # green | red | unknown
MAIN_RED_SINCE = "main.red_since"
MAIN_CHECKED = "main.checked_commit"  # the commit the main gates last passed on
SUPERVISOR_LAST_TICK = "supervisor.last_tick_at"
SUPERVISOR_MEMORY = "supervisor.memory"
