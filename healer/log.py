"""Logging: human lines on stderr, JSON lines under `.healer/logs/` (loguru).

`setup()` is called once by the CLI root callback and again by any command that learns
its fleet root later (`init`, `--root`); each call replaces the sinks it added before.
Modules just `from loguru import logger`. Secrets never reach a sink: every message and
`extra` value passes through `redact()` (values of secret-looking environment variables,
bearer tokens, `token=…`/`password: …` pairs).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from loguru import logger

if TYPE_CHECKING:
    from loguru import Record

LOG_DIR = Path(".healer") / "logs"
LOG_FILE = "healer.jsonl"
HUMAN_FORMAT = "<green>{time:HH:mm:ss}</green> <level>{level: <7}</level> {message}"

_SECRET_NAME = re.compile(r"(SECRET|TOKEN|PASSWORD|PASSWD|API_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH)", re.I)
_PATTERNS = [
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]+"),
    re.compile(r"(?i)(\b(?:token|secret|password|passwd|api[_-]?key|authorization)\b\s*[=:]\s*)(?:\"[^\"]*\"|'[^']*'|\S+)"),
    re.compile(r"(?i)(https?://[^/\s:@]+:)[^@\s]+(?=@)"),  # user:password@host
]
MASK = "***"

_state: dict[str, Any] = {"ids": [], "root": None, "debug": False}
_extra_secrets: set[str] = set()


def add_secret(value: str) -> None:
    """Mask this value in every later log line (e.g. a webhook secret read from a custom variable)."""
    if value and len(value) >= 4:
        _extra_secrets.add(value)


def _secret_values() -> list[str]:
    # short values would mask ordinary words; 6+ characters is where secrets start
    vals = {v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= 6} | _extra_secrets
    return sorted(vals, key=len, reverse=True)


def redact(text: str) -> str:
    """`text` with secret-looking parts replaced by ***."""
    for v in _secret_values():
        if v in text:
            text = text.replace(v, MASK)
    for p in _PATTERNS:
        text = p.sub(lambda m: m.group(1) + MASK, text)
    return text


def _redact_value(v: Any) -> Any:
    if isinstance(v, str):
        return redact(v)
    if isinstance(v, dict):
        return {k: (MASK if isinstance(k, str) and _SECRET_NAME.search(k) else _redact_value(x)) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_redact_value(x) for x in v)
    return v


def _patch(record: Record) -> None:
    record["message"] = redact(record["message"])
    raw = cast("dict[str, Any]", record)  # loguru 0.8 adds `template` (the unformatted message), 0.7 has none
    template = raw.get("template")
    if isinstance(template, str):
        raw["template"] = redact(template)
    for k in list(record["extra"]):
        record["extra"][k] = MASK if _SECRET_NAME.search(k) else _redact_value(record["extra"][k])


def _find_root() -> Path | None:
    env = os.environ.get("HEALER_ROOT")
    if env:
        return Path(env)
    here = Path.cwd().resolve()
    for p in (here, *here.parents):
        if (p / ".healer").is_dir():
            return p
    return None


def log_path(root: str | Path) -> Path:
    return Path(root) / LOG_DIR / LOG_FILE


def setup(root: str | Path | None = None, debug: bool = False, *, stderr: bool = True) -> Path | None:
    """(Re)configure loguru; returns the JSON log file in use, if any.

    root None: the fleet found from $HEALER_ROOT or the working directory, if any. The JSON
    file is only written inside an existing fleet (`.healer/` present): logging never creates
    a fleet as a side effect.
    """
    shutdown()
    if not _state.get("configured"):
        try:
            logger.remove(0)  # loguru's default stderr sink
        except ValueError:
            pass
        _state["configured"] = True
    # every setup, not once per process: whatever reconfigured loguru in between (a library, an embedding test
    # process), the sinks added below are redacted
    logger.configure(patcher=_patch)

    if stderr:
        _state["ids"].append(logger.add(sys.stderr, level="DEBUG" if debug else "INFO", format=HUMAN_FORMAT,
                                        colorize=None, backtrace=debug, diagnose=False))
    fleet = Path(root) if root is not None else _find_root()
    out = None
    if fleet is not None and (fleet / ".healer").is_dir():
        out = log_path(fleet)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            # rotated files are kept: healer deletes nothing, old logs included
            _state["ids"].append(logger.add(SafeFile(out).write, level="DEBUG", serialize=True,
                                            backtrace=False, diagnose=False, catch=True))
        except OSError:
            out = None  # a read-only fleet still runs; stderr keeps the story
    _state["root"], _state["debug"] = fleet, debug
    return out


class SafeFile:
    """A log-file sink that never raises and never prints a traceback: a full disk or a deleted folder
    costs log lines (one warning on stderr), not the process. Rotated by size; rotated files are kept."""

    def __init__(self, path: str | Path, rotate_bytes: int = 20 * 1024 * 1024) -> None:
        self.path = Path(path)
        self.rotate_bytes = rotate_bytes
        self.failing = False
        try:
            self.path.touch()  # the file exists from the start, as loguru's own file sink does
        except OSError:
            pass

    def write(self, message: str) -> None:
        try:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(message)
                big = f.tell() > self.rotate_bytes
            if big:
                n = 1
                while self.path.with_name(f"{self.path.name}.{n}").exists():
                    n += 1
                self.path.rename(self.path.with_name(f"{self.path.name}.{n}"))
            if self.failing:
                self.failing = False
                sys.stderr.write(f"healer: log file {self.path} writable again\n")
        except OSError as e:
            if not self.failing:
                self.failing = True
                sys.stderr.write(f"healer: log file {self.path}: {e.strerror or e}; log lines are dropped until it works again\n")


def shutdown() -> None:
    """Remove the sinks `setup()` added (flushes and closes the JSON file)."""
    for i in _state["ids"]:
        try:
            logger.remove(i)
        except ValueError:
            pass
    _state["ids"] = []
