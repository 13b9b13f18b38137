"""Durations as people write them in policies: `90s`, `30m`, `1h30m`, `24h`, `2d`."""

from __future__ import annotations

import re

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_WHOLE = re.compile(r"^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+$")

PATTERN = r"^(\d+(\.\d+)?(ms|s|m|h|d|w))+$"


def parse(text: object) -> float:
    """Seconds in a duration string. Raises ValueError with what was expected."""
    if isinstance(text, bool):
        raise ValueError(f"expected a duration like 90s, 30m, 1h30m, got {text!r}")
    if isinstance(text, (int, float)):
        if text < 0:
            raise ValueError(f"expected a non-negative duration, got {text!r}")
        return float(text)
    if not isinstance(text, str):
        raise ValueError(f"expected a duration like 90s, 30m, 1h30m, got {type(text).__name__}")
    s = text.strip().replace(" ", "")
    if not s or not _WHOLE.match(s):
        raise ValueError(f"expected a duration like 90s, 30m, 1h30m, got {text!r}")
    return float(sum(float(n) * _UNITS[u] for n, u in _PART.findall(s)))


def format(seconds: float) -> str:  # noqa: A001 - mirrors parse
    """The shortest exact spelling: 5400 -> '1h30m', 0.5 -> '500ms'."""
    if seconds == 0:
        return "0s"
    if seconds != int(seconds):
        ms = round(seconds * 1000)
        return f"{ms}ms"
    rest = int(seconds)
    out = ""
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        n, rest = divmod(rest, size)
        if n:
            out += f"{n}{unit}"
    return out
