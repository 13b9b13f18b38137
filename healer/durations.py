"""Durations as people write them in policies: `90s`, `30m`, `1h30m`, `24h`, `2d`."""

from __future__ import annotations

import math
import re

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_WHOLE = re.compile(r"^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+$")

MAX_SECONDS = 100 * 31_536_000  # a century: anything longer is a typo, and floats stay exact to the millisecond

PATTERN = r"^(\d+(\.\d+)?(ms|s|m|h|d|w))+$"


def parse(text: object) -> float:
    """Seconds in a duration string. Raises ValueError with what was expected."""
    if isinstance(text, bool):
        raise ValueError(f"expected a duration like 90s, 30m, 1h30m, got {text!r}")
    if isinstance(text, (int, float)):
        if text < 0:
            raise ValueError(f"expected a non-negative duration, got {text!r}")
        return _finite(text)
    if not isinstance(text, str):
        raise ValueError(f"expected a duration like 90s, 30m, 1h30m, got {type(text).__name__}")
    s = text.strip().replace(" ", "")
    if not s or not _WHOLE.match(s):
        raise ValueError(f"expected a duration like 90s, 30m, 1h30m, got {text!r}")
    parts = _PART.findall(s)
    # milliseconds are divided, not multiplied by 0.001, so "1s1ms" is exactly the float 1.001
    whole = sum(float(n) * _UNITS[u] for n, u in parts if u != "ms")
    return _finite(whole + sum(float(n) for n, u in parts if u == "ms") / 1000)


def needs_unit(value: object) -> str | None:
    """Why a number written in a file is no duration: a bare `90` is refused (issue 41), never read as seconds, since
    an SRE who meant 90 minutes would get agents killed after 90 s. None for anything else (parse() judges it)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value != 0:  # 0 is 0 in any unit
        n = int(value) if float(value).is_integer() else value
        return f"expected a duration with a unit (e.g. {n}s or {n}m), got {value!r}"
    return None


def _finite(value: float) -> float:
    # a 400-digit number is valid syntax but no duration: it would overflow or print as inf
    try:
        f = float(value)
    except OverflowError:
        f = math.inf
    if math.isnan(f):
        raise ValueError("expected a duration like 90s, 30m, 1h30m, got nan")
    if f > MAX_SECONDS:
        raise ValueError(f"expected a duration of at most {MAX_SECONDS // 31_536_000} years, got a larger one")
    return f


def format(seconds: float) -> str:  # noqa: A001 - mirrors parse
    """The shortest exact spelling: 5400 -> '1h30m', 0.5 -> '500ms', 61.25 -> '1m1s250ms'."""
    if seconds == 0:
        return "0s"
    rest, ms = divmod(round(seconds * 1000), 1000)
    if ms and rest + ms / 1000 != seconds:
        rest, ms = int(seconds), 0  # finer than a millisecond: keep the whole seconds exact
    out = ""
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        n, rest = divmod(rest, size)
        if n:
            out += f"{n}{unit}"
    if ms:
        out += f"{ms}ms"
    return out or "0s"
