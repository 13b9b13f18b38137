"""The terminal, kept up to date: `--watch` redraws (`healer board --watch`, `healer status --watch`) and what `healer up`
says it does (one line per transition, action and page, read from the event log by cursor; healer/narrate.py).

A redraw is a pure view of the store read again each `--interval`: on a terminal the screen is cleared and drawn
again when the view changed; into a pipe or a log a new block is printed only when its content changed (what only
the passing of time changes, an age, does not count), so the output is a history of the changes. Ctrl-C (and
SIGTERM) end a watch quietly with exit 0: it only reads. A store that cannot be read ends it with that store's own
line and exit code, as the command without `--watch` would.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console

from healer import durations, narrate
from healer.clock import iso, system
from healer.errors import UsageError

IntervalOpt = typer.Option("2s", "--interval", help="With --watch: how often to read the store again (a duration: 500ms, 2s).")
WatchOpt = typer.Option(False, "--watch", "-w", help="Redraw when it changes (Ctrl-C ends it, exit 0).")

CLEAR = "\x1b[H\x1b[2J"  # cursor home, erase the screen
# what only time changes (an age, when the dispatcher last passed: shown as "N s ago"): never a reason to print again
_AGES = frozenset({"now", "age", "heartbeat_age", "age_s", "last_tick_at"})


def interval(text: str, who: str) -> float:
    try:
        s = durations.parse(text)
    except ValueError as e:
        raise UsageError(f"{who}: --interval: {e}") from None
    if s <= 0:
        raise UsageError(f"{who}: --interval: expected a duration above 0 (e.g. 2s or 500ms), got {text!r}")
    return s


def stable(data: Any) -> str:
    """The content of a view without what only the clock changes: two reads with the same key show the same fleet.
    A value equal to the view's own `now` (a ready ticket's eligible_at) is the read's time, not the fleet's."""
    now = data.get("now") if isinstance(data, dict) else None

    def strip(d: Any) -> Any:
        if isinstance(d, dict):
            return {k: strip(v) for k, v in d.items() if k not in _AGES}
        if isinstance(d, list | tuple):
            return [strip(v) for v in d]
        return "now" if now is not None and d == now and not isinstance(d, bool) else d

    return json.dumps(strip(data), sort_keys=True, default=str)


def text_of(draw: Callable[[Console], None], tty: bool) -> str:
    """What `draw` prints, as text: with colours and the terminal's width on a tty, plain and 200 columns wide else."""
    buf = io.StringIO()
    width = None
    if tty:
        try:
            width = os.get_terminal_size(sys.stdout.fileno()).columns
        except OSError:
            width = 120
    c = Console(file=buf, force_terminal=tty, color_system="auto" if tty else None,
                width=width or int(os.environ.get("COLUMNS") or 200), soft_wrap=not tty)
    draw(c)
    return buf.getvalue()


def redraw(read: Callable[[], tuple[Any, Callable[[Console], None]]], every: float, title: str) -> None:
    """Read (data, draw) every `every` seconds and show it when it changed, until Ctrl-C or SIGTERM (exit 0)."""
    tty = sys.stdout.isatty()
    clock = system()

    def quiet(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, quiet)  # a watch only reads: a service manager's stop is as quiet as Ctrl-C
    last_key, last_text = None, None
    try:
        while True:
            data, draw = read()  # a store that fails raises its own one line and exit code, as without --watch
            key = stable(data)
            text = text_of(draw, tty)
            if tty and text != last_text:  # a terminal shows the ages too: they change, redraw
                sys.stdout.write(CLEAR + f"{title}, every {durations.format(every)} (Ctrl-C to stop)\n\n" + text)
                sys.stdout.flush()
            elif not tty and key != last_key:
                sys.stdout.write(f"--- {title} at {iso(clock.now())}\n" + text + "\n")
                sys.stdout.flush()
            last_key, last_text = key, text
            clock.sleep(every)
    except KeyboardInterrupt:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to say
            pass
        raise typer.Exit(0) from None


class Narrator:
    """`healer up`'s voice: what happened since its start, one line per event `narrate.line` speaks of (never a tick),
    read from the event log by cursor; and the spend metrics, fed from the same log (healer/metrics.py SpendFeed)."""

    def __init__(self, store, metrics=None, feed=None, echo: Callable[[str], None] = typer.echo) -> None:
        self.store, self.metrics, self.echo = store, metrics, echo
        self.seen = store.last_event_id()  # what this run does, not what the log held before it
        self.spend = feed  # a healer.metrics.SpendFeed: the metrics count what the fleet ever spent (the whole log)
        if feed is not None:
            feed.update(store, metrics)

    def step(self) -> int:
        """Print what is new; the number of lines printed."""
        last = self.store.last_event_id()
        if last <= self.seen:
            return 0
        evs = self.store.events(after=self.seen, kinds=narrate.KINDS, until_id=last)
        self.seen = last
        n = 0
        for e in evs:
            text = narrate.line(e)
            if text:
                self.echo(text)
                n += 1
        if n:
            sys.stdout.flush()
        if self.spend is not None:
            self.spend.update(self.store, self.metrics)
        return n
