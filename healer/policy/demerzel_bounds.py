"""Loop bounds wherever a Demerzel policy writes them: YAML sections (also in front matter), Markdown
tables (`| Max cycles per day | 6 |`), bullet lines (`- Max **6 cycles per day**`) and prose
(`if lock younger than 30min`). Fenced code (``` blocks) is never read: a GitHub Actions snippet is an
example, not policy. Pure: text in, bounds out.

| Demerzel says | healer key |
|---|---|
| cycles per day | loop.max_iterations_per_day (the daily cap) |
| duration / timeout per cycle | loop.iteration_timeout (the iteration deadline) |
| kill switch path | loop.kill_switch |
| consecutive (auto-)cycles | loop.max_iterations (the iteration cap, before a human looks) |
| lock age (younger than / held > N) | supervisor.lease_ttl (how long a holder's lease counts) |
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_UNITS = {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "mins": 60, "minute": 60,
          "minutes": 60, "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400}
_DUR = re.compile(r"(\d+(?:\.\d+)?)\s*(seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h|days?|d)\b", re.I)
_INT = re.compile(r"(?<![\d.:])(\d+)(?![\d.:])")
_TICKED = re.compile(r"`([^`\s]+)`")
_BARE_PATH = re.compile(r"^[\w.~/-]*[/.][\w.~/-]+$")

# target -> (label pattern, value kind)
TARGETS: dict[str, tuple[re.Pattern, str]] = {
    "daily_cap": (re.compile(r"(cycles?|iterations?|runs?|loops?)\s*(per|/|a|each)\s*day|daily[\s_-]*(cap|cycle|limit|max)", re.I), "int"),
    "iteration_deadline": (re.compile(r"(duration|time|timeout|deadline)\s*(per|/|of|for|each)\s*(a\s+)?(cycle|iteration|run)|"
                                      r"(cycle|iteration)[\s_-]*(timeout|duration|deadline)", re.I), "duration"),
    "kill_switch": (re.compile(r"kill[\s_-]*switch", re.I), "path"),
    "iteration_cap": (re.compile(r"consecutive[\s_-]*(auto[\s_-]*)?(cycles?|iterations?|runs?)", re.I), "int"),
    "lease": (re.compile(r"\block\b.{0,40}?(younger|older|held|age|stale|ttl|expir|timeout)|lock[\s_-]*(age|ttl|timeout)", re.I),
              "duration"),
}


@dataclass(frozen=True)
class Bound:
    target: str
    value: Any
    line: int
    label: str  # what the source said, for the comment


def unfenced(text: str) -> list[str]:
    """The lines of `text` with fenced code blanked (fence lines kept, so a block around them ends there)."""
    out, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
            out.append(line.strip()[:3])
        else:
            out.append("" if inside else line)
    return out


def duration(text: Any) -> float | None:
    if isinstance(text, int | float) and not isinstance(text, bool):
        return None  # a bare number has no unit: not a duration we can trust
    m = _DUR.search(str(text))
    return float(m.group(1)) * _UNITS[m.group(2).lower()] if m else None


def _path(text: Any, whole_value: bool) -> str | None:
    """A file path: a `backticked` token with a / or . (not a /slash-command), or, for a YAML value or a
    table cell, the whole value when it looks like one."""
    for tok in _TICKED.findall(str(text)):
        if ("/" in tok or "." in tok) and not re.fullmatch(r"/[\w-]+", tok):
            return tok
    t = str(text).strip().strip("*")
    return t if whole_value and _BARE_PATH.match(t) else None


def _value(kind: str, text: Any, whole_value: bool = True) -> Any:
    if kind == "int":
        if isinstance(text, int) and not isinstance(text, bool):
            return text if text >= 1 else None
        s = re.sub(r"\d{1,2}:\d{2}", "", str(text))  # 06:00–22:00 is no count
        m = _INT.search(s)
        return int(m.group(1)) if m and int(m.group(1)) >= 1 else None
    if kind == "duration":
        d = duration(text)
        return d if d and d > 0 else None
    if kind == "path":
        return _path(text, whole_value)
    return None


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def table_rows(lines: list[str]) -> list[tuple[int, list[str]]]:
    """(line number, cells) of every Markdown table body row (header and --- separator rows skipped)."""
    out = []
    for i, line in enumerate(lines):
        s = line.strip()
        if not (s.startswith("|") and s.count("|") >= 3):
            continue
        cells = _cells(s)
        if all(re.fullmatch(r":?-{2,}:?", c) for c in cells if c):
            continue
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if nxt.startswith("|") and all(re.fullmatch(r":?-{2,}:?", c) for c in _cells(nxt) if c):
            continue  # a header row
        out.append((i + 1, cells))
    return out


def _flatten(node: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(node, dict):
        return [kv for k, v in node.items() for kv in _flatten(v, f"{path}.{k}" if path else str(k))]
    return [(path, node)]


def find(lines: list[str], data: dict[str, Any], key_lines: dict[str, int]) -> dict[str, Bound]:
    """The first bound found for each target: YAML sections, then tables, then bullet lines and prose."""
    found: dict[str, Bound] = {}

    def offer(label: str, value_text: Any, line: int, whole: str | None = None) -> None:
        for target, (pat, kind) in TARGETS.items():
            if target in found or not pat.search(label.replace("_", " ")):
                continue
            v = _value(kind, value_text, whole is None)
            if v is None and whole is not None:
                v = _value(kind, whole, False)
            if v is not None:
                found[target] = Bound(target, v, line, " ".join(str(label).split())[:80])

    for path, v in _flatten(data):
        if isinstance(v, str | int | float) and not isinstance(v, bool):
            offer(path, v, key_lines.get(path.split(".")[0], 0))
    for n, cells in table_rows(lines):
        if len(cells) >= 2:
            offer(cells[0], cells[1], n)
            offer(cells[0], " ".join(cells[1:]), n, " ".join(cells))
    for n, line in enumerate(lines, 1):
        s = line.strip()
        if s and not s.startswith("|"):
            plain = s.replace("*", "")
            offer(plain, plain, n, plain)
    return found


def headings(lines: list[str]) -> list[tuple[int, str]]:
    return [(n, ln.lstrip("#").strip()) for n, ln in enumerate(lines, 1) if re.match(r"^#{1,6}\s+\S", ln)]
