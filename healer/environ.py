"""The environment of the programs a loop runs on an agent's behalf: the agent and the gates (the loop's and the
fleet's). Pure: a mapping in, a mapping out.

healer's own variables that are secrets or instructions for healer never pass: `HEALER_FAILPOINTS` (a game day's
crash orders for healer, not for the agent) and `HEALER_STORE_URL` plus libpq's `PGPASSWORD`/`PGPASSFILE` (the
store's credentials: an agent that has them can rewrite the board). With `loop.env_pass` (names or globs) only
those, a base set every program expects (PATH, HOME, the locale, the terminal, the temp dir, the user) and the
loop's own `HEALER_*` run variables pass: what an operator exported for healer (cloud credentials, tokens) stays
with healer. The notifiers' secrets are never in healer's environment once it starts anything
(healer/notify/secrets.py).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence

NEVER = ("HEALER_FAILPOINTS", "HEALER_STORE_URL", "PGPASSWORD", "PGPASSFILE")
BASE = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TERM", "COLORTERM", "TZ", "TMPDIR",
        "TMP", "TEMP", "PWD", "HEALER_LOOP_*", "HEALER_PROMPT_FILE", "HEALER_WORKDIR")


def for_programs(env: Mapping[str, str], passed: Sequence[str] | None) -> dict[str, str]:
    out = {k: v for k, v in env.items() if k not in NEVER}
    if passed is None:
        return out
    keep = (*BASE, *passed)
    return {k: v for k, v in out.items() if any(fnmatch.fnmatchcase(k, pat) for pat in keep)}
