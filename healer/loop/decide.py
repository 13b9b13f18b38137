"""The governed loop's decisions: pure functions of the iteration history and the policy.

Theory of operation. The runner (the shell) runs one iteration and condenses it
into an `IterationRecord`: the state hash (tree content + gate outcome), the
failure signature, the output key, the cost. Everything that decides whether the
loop goes on lives here, with no I/O and no clock reads:

- `preflight(...)` runs before every iteration: stop requests, kill switch and
  pause (exit 4), budgets (exit 2), a missing stop criterion (exit 65).
- `decide(...)` runs after every iteration: all gates green (exit 0),
  stalls (exit 3), budgets (exit 2), else continue.
- `normalise`, `error_lines`, `failure_signature`, `output_key`, `state_hash`
  turn raw text into stable hashes, so that progress is measured from outside.

The agent's exit code and words never appear in a decision: only gate exit codes
(through `GateResult.passed`) can end a run with success.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

from healer import digest, errors

# -- records ---------------------------------------------------------------------


@dataclass(frozen=True)
class GateResult:
    name: str
    exit_code: int | None  # None: killed at its deadline, or never run
    timed_out: bool = False
    skipped: bool = False  # not run: the iteration deadline had passed
    elapsed: float = 0.0
    judged: str = ""  # failed whatever its exit code: why (its files differ from the base's, its report; healer/gating.py)

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.skipped and not self.judged

    def outcome(self) -> str:
        if self.skipped:
            return "skipped"
        if self.timed_out:
            return "timeout"
        if self.judged:
            return "refused" if self.exit_code is None else "fail (report)"
        return "pass" if self.passed else f"exit {self.exit_code}"


@dataclass(frozen=True)
class IterationRecord:
    n: int
    tree_hash: str
    state_hash: str
    gates: tuple[GateResult, ...]
    signature: str | None = None  # failure signature; None when every gate passed
    signature_text: str = ""  # the first normalised error line, for humans
    output_key: str | None = None  # hash of the normalised agent output; None when empty
    duplicate_of: int | None = None  # earlier iteration with the same output
    agent_exit: int | None = None
    timed_out: bool = False
    killed: tuple[int, ...] = ()
    cost_usd: float = 0.0
    diff_lines: int = 0
    scope_drift: bool = False
    reverted: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    claimed_done: bool = False
    stopped: str = ""  # the runner stopped the agent early: "spend_cap", "idle" or "after_result" (healer/loop/usage.py)
    tokens: int = 0  # tokens its API turns reported (all kinds)
    turns: int = 0  # API turns seen in its stream
    started_at: float = 0.0
    duration: float = 0.0
    day: str = ""

    @property
    def all_green(self) -> bool:
        return bool(self.gates) and len(self.gates) >= 1 and all(g.passed for g in self.gates)

    def to_json(self) -> dict:
        # asdict's deep copy, without it: every field is immutable (the run's state is saved each iteration)
        d = dict(self.__dict__)
        d["gates"] = tuple(dict(g.__dict__) for g in self.gates)
        return d

    @classmethod
    def from_json(cls, d: dict) -> IterationRecord:
        d = dict(d)
        d["gates"] = tuple(GateResult(**g) for g in d.get("gates", ()))
        for k in ("killed", "reverted", "changed"):
            d[k] = tuple(d.get(k, ()))
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass(frozen=True)
class Limits:
    """The numbers a decision needs, taken from the policy's `loop` section (and CLI overrides)."""

    max_iterations: int = 12
    same_state: int = 2
    same_failure: int = 3
    duplicate_output: str = "flag"
    cycle_window: int = 8  # state hashes looked back at for a cycle (A-B-A-B); 0: off
    spend_cap_usd: float | None = 5.0
    run_timeout: float | None = None
    max_iterations_per_day: int = 100
    gates: int = 1  # how many gates are defined

    @classmethod
    def from_policy(cls, loop, max_iterations: int | None = None) -> Limits:
        return cls(
            max_iterations=max_iterations or loop.max_iterations,
            same_state=loop.stall.same_state,
            same_failure=loop.stall.same_failure,
            duplicate_output=loop.stall.duplicate_output,
            cycle_window=loop.stall.cycle_window,
            spend_cap_usd=loop.spend_cap_usd,
            run_timeout=loop.run_timeout,
            max_iterations_per_day=loop.max_iterations_per_day,
            gates=len(loop.gates),
        )


@dataclass(frozen=True)
class Facts:
    """What the shell observed just before an iteration."""

    elapsed: float = 0.0  # seconds since the run started (wall clock, across resumes)
    today: int = 0  # iterations already run today in this working tree
    kill_switch: bool = False
    paused: bool = False
    stop_signal: str | None = None  # "SIGTERM", "SIGINT"


@dataclass(frozen=True)
class Verdict:
    exit_code: int | None  # None: go on
    reason: str = ""
    kind: str = "continue"  # continue | success | budget | stalled | stopped | invalid

    @property
    def go_on(self) -> bool:
        return self.exit_code is None


CONTINUE = Verdict(None)

EXIT_WORDS = {
    errors.OK: "success",
    errors.BUDGET_EXHAUSTED: "budget exhausted",
    errors.STALLED: "stalled",
    errors.STOPPED: "stopped",
    errors.USAGE: "usage error",
    errors.INVALID_INPUT: "invalid input",
    errors.UNAVAILABLE: "unavailable",
    errors.INTERNAL: "internal error",
}


def _budget(history: Sequence[IterationRecord], limits: Limits, spent: float, facts: Facts) -> Verdict | None:
    if limits.spend_cap_usd is not None and spent >= limits.spend_cap_usd:
        return Verdict(errors.BUDGET_EXHAUSTED, f"spend cap reached: ${spent:.4f} of ${limits.spend_cap_usd:.2f}", "budget")
    if len(history) >= limits.max_iterations:
        return Verdict(errors.BUDGET_EXHAUSTED, f"iteration cap reached: {len(history)} of {limits.max_iterations}", "budget")
    if limits.run_timeout is not None and facts.elapsed >= limits.run_timeout:
        return Verdict(errors.BUDGET_EXHAUSTED, f"run time cap reached: {facts.elapsed:.0f}s of {limits.run_timeout:.0f}s", "budget")
    if facts.today >= limits.max_iterations_per_day:
        return Verdict(errors.BUDGET_EXHAUSTED,
                       f"daily cap reached: {facts.today} iterations today of {limits.max_iterations_per_day}", "budget")
    return None


def preflight(history: Sequence[IterationRecord], limits: Limits, spent: float, facts: Facts) -> Verdict:
    """Before every iteration: may the next one start?"""
    if facts.stop_signal:
        return Verdict(errors.STOPPED, f"{facts.stop_signal} received", "stopped")
    if facts.kill_switch:
        return Verdict(errors.STOPPED, "kill switch present", "stopped")
    if facts.paused:
        return Verdict(errors.STOPPED, "paused (resume with --resume)", "stopped")
    if limits.gates < 1:
        return Verdict(errors.INVALID_INPUT, "no gates defined (loop.gates is empty): nothing could ever decide success", "invalid")
    return _budget(history, limits, spent, facts) or CONTINUE


def same_state_streak(history: Sequence[IterationRecord], baseline_tree: str | None) -> int:
    """How many iterations in a row, ending with the last, changed nothing.

    An iteration changed nothing when its state hash equals the previous one's; the
    first iteration of a run is compared by tree content with the run's starting tree
    (there is no gate outcome before it).
    """
    streak = 0
    for i in range(len(history) - 1, -1, -1):
        cur = history[i]
        if i > 0:
            same = cur.state_hash == history[i - 1].state_hash
        else:
            same = baseline_tree is not None and cur.tree_hash == baseline_tree
        if not same:
            break
        streak += 1
    return streak


def same_failure_streak(history: Sequence[IterationRecord]) -> int:
    """How many iterations in a row, ending with the last, failed with the same signature."""
    if not history or history[-1].signature is None:
        return 0
    sig = history[-1].signature
    streak = 0
    for rec in reversed(history):
        if rec.signature != sig:
            break
        streak += 1
    return streak


def decide(history: Sequence[IterationRecord], limits: Limits, spent: float, facts: Facts,
                    baseline_tree: str | None = None) -> Verdict:
    """After an iteration: success, stalled, out of budget, or go on."""
    if not history:
        return CONTINUE
    last = history[-1]
    if last.all_green and len(last.gates) >= limits.gates:  # every defined gate ran, and passed
        return Verdict(errors.OK, f"all {len(last.gates)} gate(s) passed at iteration {last.n}", "success")
    # before the stall counters: a silent agent changed nothing, but it is not stuck on the task
    n = idle_streak(history)
    if n >= limits.same_state:
        return Verdict(errors.UNAVAILABLE, f"the agent printed nothing for loop.idle_timeout in {n} iteration(s) in a "
                       "row and was stopped each time: it or its model endpoint looks unreachable", "idle")
    n = same_failure_streak(history)
    if n >= limits.same_failure:
        where = f" ({last.signature_text})" if last.signature_text else ""
        return Verdict(errors.STALLED, f"same failure signature {n} times in a row{where}", "stalled")
    n = same_state_streak(history, baseline_tree)
    if n >= limits.same_state:
        return Verdict(errors.STALLED, f"state unchanged for {n} iteration(s) (hash {last.state_hash[:12]})", "stalled")
    cyc = state_cycle([r.state_hash for r in history], limits.cycle_window)
    if cyc is not None:
        period, states = cyc
        names = "-".join("ABCDEFGHIJKLMNOPQRSTUVWXYZ"[i] for i in range(period))
        return Verdict(errors.STALLED, f"state cycle of period {period} ({names}-{names}: states "
                       f"{', '.join(h[:8] for h in states)} repeat over iterations {last.n - 2 * period + 1}-{last.n})",
                       "stalled")
    if last.duplicate_of is not None and limits.duplicate_output == "stop" and _seen_before(history):
        return Verdict(errors.STALLED, f"agent output of iteration {last.n} repeats iteration {last.duplicate_of}", "stalled")
    return _budget(history, limits, spent, facts) or CONTINUE


def state_cycle(hashes: Sequence[str], window: int) -> tuple[int, list[str]] | None:
    """(period, the states of one period) when the last 2*period states are one sequence of `period` >= 2
    distinct-enough states twice over (A-B-A-B, A-B-C-A-B-C), for a period up to window // 2; else None.

    A converging agent never returns to a state it left (each state is new), so it is never caught; a
    run of one state (period 1) is the same-state streak's to judge. A period-k cycle is caught at its
    2k-th iteration of the cycle, whatever came before it."""
    if window < 4:
        return None
    tail = list(hashes[-window:])
    for p in range(2, len(tail) // 2 + 1):
        a, b = tail[-2 * p:-p], tail[-p:]
        if a == b and len(set(b)) > 1:
            return p, b
    return None


def idle_streak(history: Sequence[IterationRecord]) -> int:
    """How many iterations in a row, ending with the last, had their agent stopped for printing nothing."""
    n = 0
    for rec in reversed(history):
        if rec.stopped != "idle":
            break
        n += 1
    return n


def _seen_before(history: Sequence[IterationRecord]) -> bool:
    """The last iteration's state was reached before: its repeated words come with no progress."""
    last = history[-1]
    return any(r.state_hash == last.state_hash for r in history[:-1])


def over_cap(spent: float, cap: float | None) -> bool:
    """The run's spend, counted turn by turn, has reached its cap: the agent is stopped now."""
    return cap is not None and spent >= cap


def silent_for(now: float, last_output: float, idle_timeout: float | None) -> bool:
    """The agent printed nothing (no stream event, no byte on stdout or stderr) for loop.idle_timeout."""
    return idle_timeout is not None and idle_timeout > 0 and now - last_output >= idle_timeout


def after_result(now: float, result_at: float | None, grace: float) -> bool:
    """The CLI printed its final event `grace` seconds ago and still runs: its run is over, it is ended now. What
    that event claims decides nothing (the agent writes its own stream; only the gates judge): a forged one only
    shortens the agent's own iteration."""
    return result_at is not None and now - result_at >= grace


# -- normalisation and hashing ---------------------------------------------------------


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_ISO_TS = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?\b")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_TIME = re.compile(r"\b\d{1,2}:\d{2}:\d{2}(\.\d+)?\b")
_TMP = re.compile(r"(?:/private)?(?:/tmp|/var/tmp|/var/folders|/dev/shm)/\S*|\b(?:tmp|pytest-)[A-Za-z0-9_-]*\d[A-Za-z0-9_-]*")
_HEX0X = re.compile(r"\b0x[0-9a-fA-F]+\b")
_HEXID = re.compile(r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{7,64}\b")
_NUM = re.compile(r"(?<![A-Za-z_\d.])\d+(\.\d+)?")
_WS = re.compile(r"[ \t]+")


def _strip_volatile(text: str, roots: Iterable[str]) -> str:
    """What changes between two tellings of the same thing, whatever is compared: the roots' paths, colours,
    uuids, timestamps, clock times, temporary paths, hex ids. Each pattern runs only where it could match."""
    for r in sorted((r for r in roots if r), key=len, reverse=True):
        text = text.replace(r.rstrip("/") + "/", "").replace(r.rstrip("/"), ".")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "-" in text:
        text = _UUID.sub("<uuid>", text)
        text = _ISO_TS.sub("<ts>", text)
        text = _DATE.sub("<date>", text)
    if ":" in text:
        text = _TIME.sub("<time>", text)
    if "tmp" in text or "pytest-" in text or "/var/folders/" in text or "/dev/shm/" in text:
        text = _TMP.sub("<tmp>", text)
    if "0x" in text:
        text = _HEX0X.sub("<hex>", text)
    return _HEXID.sub("<hex>", text)


def _lines(text: str) -> str:
    lines = (_WS.sub(" ", ln).strip() for ln in text.splitlines())
    return "\n".join(ln for ln in lines if ln)


def normalise(text: str, roots: Iterable[str] = ()) -> str:
    """Strip what changes between two runs of the same failure: numbers, hex ids,
    uuids, timestamps, temporary paths, colours, spacing. Identifiers that merely
    contain digits (`test_step_3`, `py311`) are kept: they name different things."""
    return _lines(_NUM.sub("<n>", _strip_volatile(text, roots)))


_ERRORISH = re.compile(
    r"(?i)\b(error|errors|fail|failed|failure|failures|exception|assert\w*|traceback|fatal|panic|"
    r"expected|missing|undefined|not found|cannot|can't|unable)\b|^E\s"
)
_NOISE = re.compile(r"^[=_\-*#~]{3,}.*[=_\-*#~]{3,}$|^[=_\-*#~]{3,}$")  # banners: === FAILURES ===, ____ x ____
_TIERS = (re.compile(r"^(FAILED|ERROR)\b"), re.compile(r"(?i)\berror\b"), re.compile(r"^E\s"))


def error_lines(log: str, limit: int = 40) -> list[str]:
    """The lines of a gate log that carry the error; the log's tail when none look like one."""
    lines = [ln for ln in log.splitlines() if ln.strip() and not _NOISE.match(ln.strip())]
    picked = [ln for ln in lines if _ERRORISH.search(ln)]
    return (picked or lines[-20:])[-limit:]


def shows_error(log: str) -> bool:
    """Does any line of the log look like an error (what error_lines picks, not its fallback tail)?"""
    return any(_ERRORISH.search(ln) for ln in log.splitlines() if ln.strip() and not _NOISE.match(ln.strip()))


def failure_signature(gate: str, log: str, roots: Iterable[str] = ()) -> tuple[str, str]:
    """(signature, first normalised error line). Sorted, de-duplicated, hashed: the
    order in which a test runner reports does not matter, the failing things do."""
    norm = sorted({normalise(ln, roots) for ln in error_lines(log)} - {""})
    sig = digest.sha256(json.dumps([gate, norm]).encode()).hexdigest()[:16]
    lines = error_lines(log)
    ranked = [ln for t in _TIERS for ln in lines if t.search(ln.strip())] + lines
    first = next((normalise(ln, roots) for ln in ranked if normalise(ln, roots)), "")
    return sig, f"{gate}: {first}"[:200]


def silent_failure(log: str, roots: Iterable[str] = ()) -> bool:
    """True when a failing gate's log holds nothing once normalised (e.g. a bare `exit 1`)."""
    return not any(normalise(ln, roots) for ln in error_lines(log))


_DURATION = re.compile(r"(?<![A-Za-z_\d.])\d+(\.\d+)?\s?(ms|s|sec|secs|seconds?)\b")
_PID = re.compile(r"(?i)\b(pid|process)\s*[:=#]?\s*\d+")


def normalise_output(text: str, roots: Iterable[str] = ()) -> str:
    """What an agent said, with only what changes between two tellings of the same thing taken out:
    colours, uuids, timestamps, clock times, temporary paths, hex ids, pids, durations, spacing.
    Other numbers stay: "3 of 5 tests pass" and "4 of 5 tests pass" are progress, not a repeat."""
    return _lines(_DURATION.sub("<dur>", _PID.sub("pid <n>", _strip_volatile(text, roots))))


def output_key(text: str, roots: Iterable[str] = ()) -> str | None:
    """Hash of an agent's output after `normalise_output`; None when it said nothing.

    For a Claude JSON result, only its `result` text counts (cost, duration and
    session id change every time); the runner passes a stream's words alone (usage.Meter.said)."""
    res = claude_result(text)
    if res is not None and isinstance(res.get("result"), str):
        text = res["result"]
    norm = normalise_output(text, roots)
    if not norm:
        return None
    return digest.sha256(norm.encode()).hexdigest()[:16]


def state_hash(tree_hash: str, gates: Sequence[GateResult]) -> str:
    """The result-bearing state: tree content plus the gate outcome. Never a counter."""
    outcome = [(g.name, g.outcome()) for g in gates]
    return digest.sha256(json.dumps([tree_hash, outcome]).encode()).hexdigest()[:24]


def claude_result(text: str) -> dict | None:
    """The `{"type": "result", ...}` object of Claude's json / stream-json output, if any."""
    text = text.strip()
    if not text:
        return None
    candidates = [text] if text.startswith("{") else []
    candidates += [ln.strip() for ln in reversed(text.splitlines()) if ln.strip().startswith("{")][:50]
    for c in candidates:
        try:
            obj = json.loads(c)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("type") == "result":
            return obj
    return None


def reported_cost(text: str) -> float:
    res = claude_result(text)
    if res is None:
        return 0.0
    cost = res.get("total_cost_usd", res.get("cost_usd"))
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or cost != cost or cost < 0:
        return 0.0
    return float(cost)


_DONE = re.compile(r"(?i)\b(done|complete[d]?|finished|all tests pass(ed)?|task is complete)\b")


def claims_done(text: str) -> bool:
    """The agent says it is done. Recorded, never trusted: it only means the gates run."""
    res = claude_result(text)
    if res is not None and isinstance(res.get("result"), str):
        text = res["result"]
    tail = text[-2000:]
    if tail.isascii():  # (re's case-insensitive matching folds some non-ASCII letters onto these words)
        low = tail.lower()
        if not any(w in low for w in ("done", "complete", "finished", "all tests pass")):
            return False
    return bool(_DONE.search(tail))
