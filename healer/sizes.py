"""Byte sizes as people write them in policies: `512MiB`, `2GiB`, `500MB`, `1.5G`. A bare number written in a file
is refused (as a duration is, issue 41): `2048` could be bytes, KiB or MiB, and a wrong guess is an alert that
never fires or fires on everything."""

from __future__ import annotations

import re

_UNITS = {"b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3, "t": 1000**4,
          "tb": 1000**4, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}
_WHOLE = re.compile(r"^(\d+(?:\.\d+)?)\s*([a-z]+)$")
PATTERN = r"^\d+(\.\d+)?\s*([kKmMgGtT]i?[bB]?|[bB])$"
MAX_BYTES = 1 << 60  # an exbibyte: anything larger is a typo


def parse(text: object) -> int:
    """Bytes in a size; ValueError saying what was expected. Python callers may pass an int of bytes."""
    if isinstance(text, bool):
        raise ValueError(f"expected a size like 512MiB or 2GiB, got {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"expected a non-negative size, got {text!r}")
        return _bounded(text)
    if not isinstance(text, str):
        raise ValueError(f"expected a size like 512MiB or 2GiB, got {type(text).__name__}")
    m = _WHOLE.match(text.strip().lower())
    if not m or m.group(2) not in _UNITS:
        raise ValueError(f"expected a size like 512MiB or 2GiB, got {text!r}")
    return _bounded(int(float(m.group(1)) * _UNITS[m.group(2)]))


def needs_unit(value: object) -> str | None:
    """Why a number written in a file is no size (a bare `2048`), or None (parse() judges anything else)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value != 0:
        n = int(value) if float(value).is_integer() else value
        return f"expected a size with a unit (e.g. {n}MiB or {n}GiB), got {value!r}"
    return None


def _bounded(n: int) -> int:
    if n > MAX_BYTES:
        raise ValueError("expected a size of at most 1EiB, got a larger one")
    return n


def format(n: int) -> str:  # noqa: A001 - mirrors parse
    """The largest binary unit that writes `n` exactly: 536870912 -> '512MiB', 1000 -> '1000B'."""
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"
