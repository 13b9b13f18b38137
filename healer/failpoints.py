"""Named failpoints: places in the shell where a game day can kill or break healer.

    HEALER_FAILPOINTS="remedy.after_intent=kill@2;loop.before_gates=raise;x=sleep(200)"

Actions: `kill` (SIGKILL this process), `raise` (raise FailpointError), `sleep(MS)`,
`stop` (SIGSTOP this process), `exit(CODE)`, `crash` (raise FailpointCrash, a BaseException that no
`except Exception` of the shell survives: a SIGKILL for a world simulated in-process, whose open
transaction rolls back and whose objects are dropped). `@N` fires at the Nth hit only (1-based);
without it, every hit fires. Unset, a hit is one dict lookup.

Modules declare their points at import time with `declare(name, where)`; `healer
failpoints` imports every module and lists them.
"""

from __future__ import annotations

import importlib
import os
import re
import signal
import sys
import threading
from dataclasses import dataclass

from healer.clock import system

ENV = "HEALER_FAILPOINTS"


class FailpointError(RuntimeError):
    pass


class FailpointCrash(BaseException):  # noqa: N818 - named for what it stands for: the process dies here
    """The `crash` action: unwinds through every handler but `finally` and transaction rollbacks, as a
    SIGKILL would end the process there (the simulated world then drops the dead objects)."""


@dataclass(frozen=True)
class Declared:
    name: str
    where: str
    module: str
    line: int


_registry: dict[str, Declared] = {}
_hits: dict[str, int] = {}
_lock = threading.Lock()
_spec_cache: tuple[str, dict[str, tuple[str, str, int | None]]] | None = None
_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")
_ITEM = re.compile(r"^\s*([a-z0-9_.]+)\s*=\s*([a-z]+)(?:\(([^)]*)\))?(?:@(\d+))?\s*$")


def declare(name: str, where: str) -> str:
    """Register a failpoint; returns its name so callers can keep it as a constant."""
    if not _NAME.match(name):
        raise ValueError(f"failpoint name {name!r} must be dotted lower-case, e.g. remedy.after_intent")
    frame = sys._getframe(1)  # inspect.stack() reads every caller's source: a third of `healer loop run`'s start-up
    _registry.setdefault(name, Declared(name, where, frame.f_globals.get("__name__", "?"), frame.f_lineno))
    return name


def registry() -> list[Declared]:
    return sorted(_registry.values(), key=lambda d: d.name)


def parse_spec(text: str) -> dict[str, tuple[str, str, int | None]]:
    """name -> (action, argument, nth). Raises ValueError naming the bad item."""
    out: dict[str, tuple[str, str, int | None]] = {}
    for raw in text.split(";"):
        if not raw.strip():
            continue
        m = _ITEM.match(raw)
        if not m:
            raise ValueError(f"{ENV}: cannot read {raw.strip()!r}; expected name=action[(arg)][@N]")
        name, action, arg, nth = m.groups()
        if action not in {"kill", "raise", "sleep", "stop", "exit", "crash", "off"}:
            raise ValueError(f"{ENV}: unknown action {action!r} for {name}; expected kill, raise, sleep(MS), stop, exit(CODE), "
                             "crash, off")
        why = _bad_argument(action, arg)
        if why:
            raise ValueError(f"{ENV}: {raw.strip()!r}: {why}")
        if nth is not None and int(nth) < 1:
            raise ValueError(f"{ENV}: {raw.strip()!r}: expected @N with N at least 1 (hits count from 1), got @{nth}")
        out[name] = (action, arg or "", int(nth) if nth else None)
    return out


def _bad_argument(action: str, arg: str | None) -> str | None:
    """Why `action(arg)` could never act as asked (checked up front, not when the point is hit), or None."""
    if action == "sleep" and arg is not None:
        try:
            ms = float(arg)
        except ValueError:
            ms = -1.0
        return None if 0 <= ms < float("inf") else f"expected sleep(MS), MS a number of milliseconds, got sleep({arg})"
    if action == "exit" and arg is not None:
        ok = arg.strip().isdigit() and int(arg) <= 255
        return None if ok else f"expected exit(CODE), CODE from 0 to 255, got exit({arg})"
    if action not in ("sleep", "exit") and arg is not None:
        return f"expected {action} without an argument, got {action}({arg})"
    return None


def _active() -> dict[str, tuple[str, str, int | None]]:
    global _spec_cache
    text = os.environ.get(ENV, "")
    if not text:
        return {}
    if _spec_cache is None or _spec_cache[0] != text:
        _spec_cache = (text, parse_spec(text))
    return _spec_cache[1]


# `ENV in os.environ` costs a KeyError per miss (~1-2 us); the dict behind os.environ (kept in
# step by every os.environ write, monkeypatch included) answers in tens of nanoseconds
_ENV_DATA: dict | None
_ENV_KEY: object
try:
    _ENV_DATA, _ENV_KEY = os.environ._data, os.environ.encodekey(ENV)  # type: ignore[attr-defined]
except AttributeError:  # pragma: no cover - not CPython's os.environ
    _ENV_DATA, _ENV_KEY = None, None


def hit(name: str) -> None:
    """Mark that execution passed `name`; act if HEALER_FAILPOINTS says so."""
    if (_ENV_KEY not in _ENV_DATA) if _ENV_DATA is not None else (ENV not in os.environ):
        return
    spec = _active().get(name)
    if spec is None:
        return
    with _lock:
        _hits[name] = n = _hits.get(name, 0) + 1
    action, arg, nth = spec
    if nth is not None and n != nth:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif action == "raise":
        raise FailpointError(f"failpoint {name} fired (hit {n})")
    elif action == "crash":
        raise FailpointCrash(f"failpoint {name} crashed the process (hit {n})")
    elif action == "sleep":
        system().sleep(float(arg or "1000") / 1000.0)
    elif action == "exit":
        os._exit(int(arg or "1"))


def reset() -> None:
    global _spec_cache
    with _lock:
        _hits.clear()
        _spec_cache = None


def load_all() -> None:
    """Import every healer and chaos module so that all declarations are registered."""
    import pkgutil  # lazy: pkgutil: 1.6 ms of `loop run`'s start

    for pkg_name in ("healer", "chaos"):
        try:
            pkg = importlib.import_module(pkg_name)
        except ImportError:
            continue
        for info in pkgutil.walk_packages(pkg.__path__, pkg_name + "."):
            if info.name.endswith(".__main__"):
                continue  # importing an entry point would run it
            try:
                importlib.import_module(info.name)
            except (Exception, SystemExit):  # noqa: BLE001 - an optional module (docker...) may not import here
                continue
