"""The outbox courier: delivers owed notifications without ever holding up a tick.

`Courier` is a worker thread (started by `healer up` and `healer supervise`): it claims due
rows (a claim is a lease, so two workers never send the same row at once and a dead
worker's rows come back), sends each on a small thread pool with the notifier's own timeout,
and records the outcome: `notify.delivered`, `notify.failed` (pending again after a backoff
with jitter), `notify.rejected` (a 4xx: retrying cannot help) or `notify.expired`. Sends are
at least once; the idempotency key (the `Idempotency-Key` header and the payload's
`idempotency_key`) lets a receiver that answered too slowly drop the repeat.
"""

from __future__ import annotations

import os
import random
import socket
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loguru import logger

from healer import failpoints, procs
from healer.errors import StoreLost, corrupt
from healer.notify import alertmanager, command, secrets, webhook
from healer.notify.identity import REMOTE, fingerprint
from healer.notify.webhook import Rejected, scrub
from healer.store import open_store, outage

if TYPE_CHECKING:
    from healer.records import OutboxItem

BASE_DELAY = 0.5  # seconds before the first retry; doubles per failed try
MAX_DELAY = 300.0
POLL = 0.25  # how often a worker looks for rows another process owes (a local notify wakes it at once)
WORKERS = 8
ONCE_DEADLINE = 10.0  # a --once command waits this long for answers; what is still out stays owed for the next run

FP_AFTER_CLAIM = failpoints.declare("notify.after_claim", "healer/notify/outbox.py: rows claimed, nothing sent yet")
FP_AFTER_SEND = failpoints.declare("notify.after_send", "healer/notify/outbox.py: the receiver answered 2xx, "
                                   "the row not yet marked delivered")

_WAKE = threading.Event()


def wake() -> None:
    """Tell this process's courier that a notification is owed (cross-process rows are found by polling)."""
    _WAKE.set()


def backoff(tries: int, rnd: random.Random | None = None) -> float:
    """Delay before try `tries + 1`: exponential, capped, with 'equal jitter' so many owed rows never retry in step."""
    d = min(MAX_DELAY, BASE_DELAY * 2 ** max(0, tries - 1))
    return d / 2 + (rnd or random).random() * d / 2


def _send(n, item, root: str) -> None:
    if n.kind == "alertmanager":
        data = alertmanager.alerts(item.payload, n.labels, n.generator_url)
        webhook.send(alertmanager.endpoint(n.url), data, secret_env=n.secret_env, timeout=n.timeout, idem=item.idem)
        failpoints.hit(FP_AFTER_SEND)
        return
    data = webhook.body(item.payload, item.idem, getattr(n, "format", "healer"), getattr(n, "url", None))
    if isinstance(data, list):  # Alertmanager's API (a legacy `format: alertmanager` webhook toward it)
        data = alertmanager.alerts(item.payload, n.labels, n.generator_url)
    if n.kind == "webhook":
        webhook.send(n.url, data, secret_env=n.secret_env, timeout=n.timeout, idem=item.idem)
    elif n.kind == "command":
        command.send(n.command, data, timeout=n.timeout, cwd=root, idem=item.idem)
    else:
        raise ValueError(f"notifier kind {n.kind!r} is not delivered through the outbox")
    failpoints.hit(FP_AFTER_SEND)


def _dead(holder: str) -> bool:
    """A courier of this host (`courier@HOST:PID:...`) whose process is gone: its claims need not wait out their lease."""
    who, _, rest = holder.partition("@")
    host, _, tail = rest.partition(":")
    pid = tail.partition(":")[0]
    return who == "courier" and host == socket.gethostname() and pid.isdigit() and not procs.alive(int(pid))


def _remote(policy) -> dict:
    return {fingerprint(n): n for n in policy.notify.notifiers if n.kind in REMOTE}


def _scrub(n, text: str) -> str:
    secret = secrets.get(getattr(n, "secret_env", None))
    return scrub(text, secret, getattr(n, "url", None))


def _settle_undelivered(store, item) -> None:
    """A notification nobody received (every row given up, no local notifier) must not hold its key's cooldown."""
    if item.payload.get("local"):
        return
    sib = store.outbox(key=item.key, idem=item.idem)
    if all(s.state in ("expired", "rejected") for s in sib):
        store.release_cooldown(item.key, item.created_at)


@dataclass
class Pass:
    delivered: int = 0
    failed: int = 0
    given_up: int = 0
    inflight: int = 0
    errors: list[str] = field(default_factory=list)


class Courier:
    """Delivers the outbox of one store. `run()` until `stop()`; `drain_once()` for one bounded pass (--once)."""

    def __init__(self, store, policy, *, holder: str | None = None, workers: int = WORKERS, metrics=None) -> None:
        self.store = store
        self.policy = policy
        self.holder = holder or f"courier@{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="notify")
        self.workers = workers
        self.metrics = metrics
        self.owns_store = False  # start()'s courier closes the store it opened
        self._inflight: dict[Future, tuple[Any, OutboxItem]] = {}  # (notifier, item)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rnd = random.Random()

    def _lease(self) -> float:
        timeouts = [float(n.timeout) for n in _remote(self.policy).values()] or [10.0]
        return max(timeouts) + 30.0

    def _claim(self, out: Pass) -> None:
        room = self.workers * 4 - len(self._inflight)
        if room <= 0:
            return
        claimed, expired = self.store.outbox_claim(self.holder, limit=room, lease=self._lease(), dead=_dead)
        for it in expired:
            out.given_up += 1
            _settle_undelivered(self.store, it)
        if not claimed:
            return
        failpoints.hit(FP_AFTER_CLAIM)
        remote = _remote(self.policy)
        for it in claimed:
            n = remote.get(it.notifier)
            if n is None:
                self.store.outbox_failed(it.id, error="notifier no longer configured", next_at=self.store.now(), final="expired")
                _settle_undelivered(self.store, it)
                out.given_up += 1
                continue
            self._inflight[self.pool.submit(_send, n, it, self.store.root)] = (n, it)

    def _record(self, done, out: Pass) -> None:
        for fut in done:
            n, it = self._inflight.pop(fut)
            err = fut.exception()
            if err is None:
                if self.store.outbox_delivered(it.id):
                    out.delivered += 1
                    if self.metrics is not None:
                        self.metrics.delivered(it, self.store.now() - it.created_at)
                continue
            reason = _scrub(n, f"{type(err).__name__}: {err}" if not str(err).startswith(("webhook", "notify")) else str(err))
            out.errors.append(reason)
            if isinstance(err, Rejected):
                self.store.outbox_failed(it.id, error=reason, next_at=self.store.now(), final="rejected")
                _settle_undelivered(self.store, it)
                out.given_up += 1
                if self.metrics is not None:
                    self.metrics.rejected(it)
            else:
                self.store.outbox_failed(it.id, error=reason, next_at=self.store.now() + backoff(it.tries + 1, self._rnd))
                out.failed += 1
            if self.metrics is not None:
                self.metrics.failed(it)
            logger.warning("notification {} to {} not delivered (try {}): {}", it.key, it.payload.get("notifier"),
                           it.tries + 1, reason)

    def step(self, timeout: float = POLL) -> Pass:
        """Record what finished, claim what is due, then wait up to `timeout` for a send to finish or a wake."""
        out = Pass()
        done = [f for f in self._inflight if f.done()]
        self._record(done, out)
        self._claim(out)
        if self._inflight:
            finished, _ = wait(list(self._inflight), timeout=timeout, return_when=FIRST_COMPLETED)
            self._record(finished, out)
        else:
            _WAKE.wait(timeout)
        _WAKE.clear()
        out.inflight = len(self._inflight)
        return out

    def drain_once(self, deadline: float | None = None) -> Pass:
        """Try every due row once and wait for the answers (bounded by the notifiers' timeouts): `--once` runs."""
        out = Pass()
        self._claim(out)
        finished, _ = wait(list(self._inflight), timeout=deadline)
        self._record(finished, out)
        out.inflight = len(self._inflight)
        return out

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as e:  # noqa: BLE001 - the courier outlives a bad row or a locked store; rows stay owed
                if isinstance(e, StoreLost) or corrupt(e):  # gone past its tolerance, damaged or deleted: the daemon
                    return  # says so, once (a damaged page met here first is the daemon's one line too)
                if outage.unavailable(e):  # the store is away: one line per outage (healer/store/outage.py)
                    outage.note(self.store, e, tried=False)
                    self._stop.wait(1.0)
                    continue
                # one line (a full disk fails every pass: a traceback each second would bury the story)
                first = str(e).strip().splitlines()[0] if str(e).strip() else "-"
                try:
                    logger.error("notification courier pass failed ({}: {}); retrying", type(e).__name__, first)
                except Exception:  # noqa: BLE001
                    pass
                self._stop.wait(1.0)

    def start(self) -> Courier:
        self._thread = threading.Thread(target=self.run, name="notify-courier", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        """Stop claiming; sends still in flight keep their claim and are retried by the next worker after it lapses."""
        self._stop.set()
        _WAKE.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.pool.shutdown(wait=False, cancel_futures=True)


def start(root, policy, clock=None, *, metrics=None) -> Courier:
    """A courier on its own store connection (so a slow commit elsewhere never holds it up), already running."""
    c = Courier(open_store(root, clock), policy, metrics=metrics)
    c.owns_store = True
    return c.start()


def finish(c: Courier | None) -> None:
    if c is None:
        return
    c.stop()
    if c.owns_store:
        c.store.close()
