"""How an attempt ended, pure: the agent's own doing, or the infrastructure's.

Theory of operation. An attempt ends with an exit code (None: the process vanished; negative: a
signal), maybe a machine-readable `cause` from the loop's result file (`result.json`, written by
`healer loop run` when it ends for a reason of its own), and maybe the loop's own one-line error
(its `reason`, or the `healer: ...` line a loop that could not even write its result printed).
`classify` turns that into an `Ending`:

- `clean`: exit 0;
- `infra`: the infrastructure ended it (the store unavailable or locked, the disk full, the sandbox
  failing to start, a git lock held by another process, the runner lost with its host or dispatcher).
  Such an attempt is recorded as such (`attempt.infra`, a failure signature starting `infra:`), counts
  toward no launch budget and no same-commit or same-state escalation, and is retried with
  `retry.infra_backoff`;
- `agent`: anything else, the agent's own behaviour: budgets count it and escalations see it.

Only the loop runner's own exits can be infrastructure by their words: 69 (a service it needs does not
answer), 70 (its internal error) and 74 (its disk took no more writes). An agent's exit is passed on by
the loop as the loop's verdict (1, 2, 3), so an agent cannot make its own failure look like the
infrastructure's by printing a store error. A signal is the agent's (an agent may kill itself) unless a
host event explains it (`interrupted`: its dispatcher or its host was lost meanwhile).

No I/O. The table `CAUSES` is the one list of causes (docs/fleet.md prints it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CLEAN, AGENT, INFRA = "clean", "agent", "infra"
PREFIX = "infra"  # failure-signature prefix of an infrastructure ending: "infra: <cause>: <detail>"

DISK_FULL = "disk_full"
STORE_UNAVAILABLE = "store_unavailable"
STORE_BUSY = "store_busy"
SANDBOX_START = "sandbox_start"
GIT_LOCK = "git_lock"
HOST_EVENT = "host_event"
MODEL_UNAVAILABLE = "model_unavailable"
WORKTREE_BUSY = "worktree_busy"

# the runner's own exits (healer/errors.py): only these can carry an infrastructure cause
UNAVAILABLE, INTERNAL, HOST_TROUBLE = 69, 70, 74
RUNNER_EXITS = frozenset({UNAVAILABLE, INTERNAL, HOST_TROUBLE})


@dataclass(frozen=True)
class Cause:
    name: str
    what: str  # one line for the docs and the evidence
    patterns: tuple[str, ...]  # regular expressions, matched case-insensitively against the runner's own words
    errors: tuple[str, ...] = ()  # exception class names that are this cause whatever their words


CAUSES: tuple[Cause, ...] = (
    Cause(DISK_FULL, "the disk took no more writes (full, over quota, read-only)",
          (r"no space left on device", r"database or disk is full", r"disk quota exceeded", r"read-only file system",
           r"\benospc\b", r"\bedquot\b", r"the host took no more writes"), ("HostTrouble",)),
    Cause(STORE_UNAVAILABLE, "the store's server did not answer or took no writes (restart, failover, read-only, "
                             "network blip)",
          (r"the database system is (shutting down|starting up|in recovery mode)", r"connection refused",
           r"server closed the connection", r"terminating connection due to administrator command",
           r"could not connect to server", r"cannot connect", r"connection (to server )?.*(lost|failed|timed out)",
           r"consuming input failed", r"store is unavailable", r"read-only transaction", r"readonlysqltransaction",
           r"the store (stayed|has been) unavailable"), ("StoreUnavailable", "StoreGone", "ReadOnlySqlTransaction")),
    Cause(STORE_BUSY, "the store was locked by another process or its file could not be read or written",
          (r"database is locked", r"database table is locked", r"disk i/o error"), ()),
    Cause(MODEL_UNAVAILABLE, "the agent CLI's model endpoint only ever answered 5xx, 429 or connection errors "
                             "(read from the CLI's stream; the model never answered and nothing changed)",
          (r"model endpoint unavailable", r"its model endpoint \S+ \([^)]*\) does not answer"), ("ModelUnavailable",)),
    Cause(SANDBOX_START, "the sandbox (bubblewrap, a container) failed to start the program",
          (r"sandbox \S+ failed to start", r"bwrap: "), ("SandboxFailed",)),
    Cause(GIT_LOCK, "a git lock file was held by another process",
          (r"unable to create '[^']*\.lock'", r"another git process seems to be running", r"\.lock': file exists"), ()),
    Cause(WORKTREE_BUSY, "the ticket's worktree was still in use by another process (a git child a kill missed)", (), ()),
    Cause(HOST_EVENT, "the runner was lost with its host or its dispatcher (a crash, a host given up)", (), ()),
)
BY_NAME = {c.name: c for c in CAUSES}
_COMPILED = tuple((c.name, re.compile("|".join(c.patterns), re.IGNORECASE)) for c in CAUSES if c.patterns)


@dataclass(frozen=True)
class Ending:
    kind: str  # clean | agent | infra
    cause: str | None = None  # a CAUSES name when infra
    detail: str = ""

    @property
    def infra(self) -> bool:
        return self.kind == INFRA

    def signature(self) -> str:
        """The attempt's failure signature for an infrastructure ending."""
        line = " ".join(self.detail.split())[:200]
        return f"{PREFIX}: {self.cause}" + (f": {line}" if line else "")


def cause_of(text: str, error: str | None = None) -> str | None:
    """The infrastructure cause of a failure the runner saw (its exception's class name and message), or None
    when it is not one the table knows. The runner writes it into its result file as `cause`."""
    for c in CAUSES:
        if error is not None and error in c.errors:
            return c.name
    for name, rx in _COMPILED:
        if text and rx.search(text):
            return name
    return None


def classify(code: int | None, *, cause: str | None = None, text: str = "", interrupted: bool = False) -> Ending:
    """How an attempt ended. `code`: its exit code (None vanished, negative a signal); `cause`: the result
    file's machine-readable cause; `text`: the runner's own words (its result's reason, or its `healer:` line);
    `interrupted`: a host event explains a missing exit (its dispatcher or its host was lost)."""
    if interrupted:
        return Ending(INFRA, HOST_EVENT, text)
    if code == 0:
        return Ending(CLEAN)
    if code is None or code not in RUNNER_EXITS:
        return Ending(AGENT, None, text)
    if cause in BY_NAME:
        return Ending(INFRA, cause, text)
    if code == HOST_TROUBLE:
        return Ending(INFRA, DISK_FULL, text)
    found = cause_of(text)
    if found is not None:
        return Ending(INFRA, found, text)
    return Ending(AGENT, None, text)


def is_infra(signature: str | None) -> bool:
    """An attempt's recorded failure signature says the infrastructure ended it."""
    return signature is not None and signature.startswith(PREFIX + ":")


def runner_words(reason: str | None, log_tail: str) -> str:
    """The runner's own words about its end: its result's reason when it wrote one, else the lines it printed
    as healer (`healer: ...`, the CLI's one-line error) at the end of its log. Never the agent's output."""
    if reason:
        return reason
    return "\n".join(ln for ln in log_tail.splitlines() if ln.startswith("healer:"))[-2000:]
