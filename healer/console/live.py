"""Server-sent events: the store's new events by cursor (a transition reaches the browser within a poll, 0.2 s), and
a read-only tail of an agent's log. Both end when the console stops; each message is JSON or plain text that the page
sets as text, never as HTML."""

from __future__ import annotations

import codecs
import json
import os
import threading
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path

import anyio

from healer.console import views

POLL = 0.2  # seconds between two reads of the event log when it had nothing new
BATCH = 500  # events per read: a burst is sent in slices, the cursor never skips
TAIL_START = 64 * 1024  # an attach starts this far from the end of the log
CHUNK = 16 * 1024  # at most this much output per message
QUIET_KINDS = (".tick",)  # the supervisor's and dispatcher's ticks: most of the log, nothing to watch


async def fleet_events(store, after: int | None, stopping: threading.Event, *, all_kinds: bool = False,
                       poll: float = POLL) -> AsyncIterator[dict]:
    cursor = after if after is not None else await anyio.to_thread.run_sync(store.last_event_id)
    yield {"event": "hello", "data": json.dumps({"cursor": cursor})}
    while not stopping.is_set():
        evs = await anyio.to_thread.run_sync(partial(store.events, after=cursor, limit=BATCH))
        for e in evs:
            cursor = max(cursor, e.id)
            if not all_kinds and e.kind.endswith(QUIET_KINDS):
                continue
            yield {"id": str(e.id), "event": "fleet", "data": json.dumps(views.live_event(e), default=str)}
        if len(evs) < BATCH:
            await anyio.sleep(poll)


def agent_log(root: Path, agent_id: str) -> Path | None:
    """The agent's output file, where the dispatcher's runtime writes it (.healer/logs/agents/<id>.log); None for
    an id that could leave that folder."""
    logs = (root / ".healer" / "logs" / "agents").resolve()
    if not agent_id or "/" in agent_id or agent_id.startswith("."):
        return None
    return logs / f"{agent_id}.log"


def open_log(p: Path) -> int | None:
    """Read-only, never through a symlink (an agent that swapped its log for a link to a secret gets nothing)."""
    try:
        return os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None


def read_tail(p: Path, limit: int = 256 * 1024) -> str:
    fd = open_log(p)
    if fd is None:
        return ""
    try:
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - limit), os.SEEK_SET)
        return os.read(fd, limit).decode("utf-8", "replace")
    finally:
        os.close(fd)


async def tail(p: Path, ended: Callable[[], bool], stopping: threading.Event, *, poll: float = POLL) -> AsyncIterator[dict]:
    """The log from TAIL_START before its end, then every new byte, until the agent ended and the log is read out."""
    fd = None
    dec = codecs.getincrementaldecoder("utf-8")("replace")
    try:
        while not stopping.is_set():
            if fd is None:
                fd = open_log(p)
                if fd is not None:
                    os.lseek(fd, max(0, os.fstat(fd).st_size - TAIL_START), os.SEEK_SET)
            data = os.read(fd, CHUNK) if fd is not None else b""
            if data:
                yield {"event": "output", "data": dec.decode(data)}
                continue
            if await anyio.to_thread.run_sync(ended):
                yield {"event": "end", "data": "the agent ended"}
                return
            await anyio.sleep(poll)
    finally:
        if fd is not None:
            os.close(fd)
