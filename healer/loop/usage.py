"""Spend counted as it streams: pure parsing of the agent CLIs' output lines into usage per API turn.

No I/O and no clock: the runner feeds each line of the agent's stdout to a `Meter` as it arrives
(healer/loop/runner.py's reader) and asks it what has been spent so far. A killed or hung
iteration's spend is then what its turns reported before the kill, never $0.

What each CLI prints (looked up in their sources and documentation, not guessed):

- Claude Code `-p --output-format stream-json --verbose`: one JSON object a line.
  `{"type":"system","subtype":"init","model":...}` first; `{"type":"assistant","message":{"id","model",
  "usage":{input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens}}}` once per
  content block, the SAME `message.id` (one API call) repeated with the usage copied again, its
  output_tokens growing: counted once per id, each field at its largest; with
  `--include-partial-messages` (the preset passes it), `{"type":"stream_event","event":{"type":
  "message_start"|"message_delta"}}` carry the same usage, message_delta's output count final at the
  end of each API call (the assistant lines carry message_start's, often 1); the final `{"type":"result","total_cost_usd":...,"result":"..."}` is the CLI's
  own bill of the whole session.
- Codex `exec --json` (codex-rs/exec/src/exec_events.rs): `thread.started`, `turn.started`,
  `item.started|updated|completed` (`item.type`: agent_message, reasoning, command_execution, ...),
  `turn.completed {"usage":{input_tokens, cached_input_tokens, output_tokens}}` (the thread's running
  total, event_processor_with_jsonl_output.rs), `turn.failed`, `error`. No dollars, and tokens only at the
  end of a turn; Codex's session file (`$CODEX_HOME/sessions/.../rollout-*.jsonl`) has one
  `{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{...}}}}` per API call:
  the runner feeds it too when the agent's CODEX_HOME is known, so a killed Codex iteration counts.

Tokens are priced from `loop.prices` (per model name prefix, the longest matching prefix wins) over
the built-in table below; a model matching nothing is priced at the preset's default model (a dollar
cap always applies). Claude's own `total_cost_usd` is used when it is higher than the estimate
(the estimate undercounts output tokens that only the last content block carries).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing
if TYPE_CHECKING:
    from typing import Any

# The event that ends a CLI's run, by preset: Claude Code's `{"type":"result",...}` (stream-json, success or
# error), Codex's `turn.completed` / `turn.failed` (`exec --json` runs one turn). A `command` agent may print
# either. Seen on the agent's stdout, it starts loop.agent.after_result_grace (docs/loop.md): a CLI that keeps
# running after it (a background shell of Claude Code's) is ended then, and the gates judge as always.
FINAL = {"claude": ("result",), "codex": ("turn.completed", "turn.failed"),
         "command": ("result", "turn.completed", "turn.failed")}


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input: float
    output: float
    cached_input: float | None = None  # cache reads (Anthropic) / cached input (OpenAI); None: input price
    cache_write: float | None = None  # Anthropic cache creation; None: input price


# Public list prices (USD per million tokens), late 2025. A policy's `loop.prices` overrides any entry.
DEFAULT_PRICES: dict[str, Price] = {
    "claude-opus-4-5": Price(5.0, 25.0, 0.50, 6.25),
    "claude-opus-4": Price(15.0, 75.0, 1.50, 18.75),
    "claude-3-opus": Price(15.0, 75.0, 1.50, 18.75),
    "claude-sonnet-4": Price(3.0, 15.0, 0.30, 3.75),
    "claude-3-7-sonnet": Price(3.0, 15.0, 0.30, 3.75),
    "claude-3-5-sonnet": Price(3.0, 15.0, 0.30, 3.75),
    "claude-haiku-4-5": Price(1.0, 5.0, 0.10, 1.25),
    "claude-3-5-haiku": Price(0.80, 4.0, 0.08, 1.0),
    "claude": Price(3.0, 15.0, 0.30, 3.75),  # any other Claude model: Sonnet's price
    "gpt-5-mini": Price(0.25, 2.0, 0.025),
    "gpt-5.1-codex-mini": Price(0.25, 2.0, 0.025),
    "gpt-5-nano": Price(0.05, 0.40, 0.005),
    "gpt-5": Price(1.25, 10.0, 0.125),  # gpt-5, gpt-5-codex, gpt-5.1, gpt-5.1-codex ...
    "gpt-4.1": Price(2.0, 8.0, 0.50),
    "o3": Price(2.0, 8.0, 0.50),
    "o4-mini": Price(1.10, 4.40, 0.275),
}
PRESET_MODEL = {"claude": "claude-sonnet-4", "codex": "gpt-5", "command": "claude-sonnet-4"}


def price_table(overrides: Mapping[str, Any] | None) -> dict[str, Price]:
    """The built-in table with the policy's entries (Price, or a mapping of its fields) over it."""
    table = dict(DEFAULT_PRICES)
    for k, v in (overrides or {}).items():
        if isinstance(v, Price):
            table[k.lower()] = v
        elif isinstance(v, Mapping):
            table[k.lower()] = Price(**{f: float(v[f]) for f in ("input", "output", "cached_input", "cache_write")
                                        if v.get(f) is not None})
        else:  # a pydantic model (healer.policy.schema.ModelPrice)
            table[k.lower()] = Price(float(v.input), float(v.output), getattr(v, "cached_input", None),
                                     getattr(v, "cache_write", None))
    return table


def price_for(model: str | None, table: Mapping[str, Price], preset: str = "claude") -> tuple[str, Price]:
    """(the table key used, its price): the longest prefix of `model`; else `*`; else the preset's default."""
    m = (model or "").lower()
    best = max((k for k in table if k != "*" and m.startswith(k)), key=len, default=None) if m else None
    if best is not None:
        return best, table[best]
    if "*" in table:
        return "*", table["*"]
    key = PRESET_MODEL.get(preset, "claude-sonnet-4")
    return key, table.get(key) or DEFAULT_PRICES[key]


@dataclass(frozen=True)
class Tokens:
    input: int = 0  # not cached (Anthropic's input_tokens; OpenAI's input_tokens minus cached)
    output: int = 0
    cached: int = 0  # cache reads / cached input
    cache_write: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output + self.cached + self.cache_write

    def cost(self, p: Price) -> float:
        cr = p.input if p.cached_input is None else p.cached_input
        cw = p.input if p.cache_write is None else p.cache_write
        return (self.input * p.input + self.output * p.output + self.cached * cr + self.cache_write * cw) / 1e6

    def merge_max(self, o: Tokens) -> Tokens:
        return Tokens(max(self.input, o.input), max(self.output, o.output), max(self.cached, o.cached),
                      max(self.cache_write, o.cache_write))

    def plus(self, o: Tokens) -> Tokens:
        return Tokens(self.input + o.input, self.output + o.output, self.cached + o.cached,
                      self.cache_write + o.cache_write)


# Codex's words for a failed request (codex-rs: "unexpected status 529 ...", "exceeded retry limit, last status:
# 429 Too Many Requests", "stream disconnected before completion: error sending request ...")
_STATUS = re.compile(r"\b(?:status:?|status code)\s*(\d{3})\b", re.IGNORECASE)
_CONNECT = re.compile(r"error sending request|connection refused|stream disconnected|connection reset|timed out|"
                      r"dns error|tcp connect error|connection_failed|connection error|econnrefused", re.IGNORECASE)


def _int(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or v > 1e12:
        return 0
    return int(v)


def anthropic_tokens(u: object) -> Tokens | None:
    if not isinstance(u, Mapping):
        return None
    return Tokens(_int(u.get("input_tokens")), _int(u.get("output_tokens")), _int(u.get("cache_read_input_tokens")),
                  _int(u.get("cache_creation_input_tokens")))


def openai_tokens(u: object) -> Tokens | None:
    if not isinstance(u, Mapping):
        return None
    inp, cached = _int(u.get("input_tokens")), _int(u.get("cached_input_tokens"))
    cached = min(cached, inp)
    # reasoning tokens are billed as output; codex's output_tokens may or may not include them: the larger
    out = max(_int(u.get("output_tokens")), _int(u.get("reasoning_output_tokens")))
    return Tokens(inp - cached, out, cached, 0)


@dataclass(frozen=True)
class Turn:
    """One API call's usage as known now (it may grow while the call streams)."""

    key: str
    tokens: Tokens
    usd: float
    model: str
    estimated: bool = False  # tokens estimated from what streamed (`Meter.estimate_open`), not reported by the API


class Meter:
    """Fed the agent's output a line at a time; knows what the iteration has spent so far.

    `feed(line)` answers the turns whose usage that line added to or changed (empty for other lines)."""

    def __init__(self, preset: str, prices: Mapping[str, Price] | None = None, model: str | None = None,
                 scale: float = 1.0) -> None:
        self.preset = preset
        self.scale = max(1.0, scale)  # learnt from the CLI's own bill in an earlier iteration (calibrate)
        self.table = dict(prices) if prices is not None else dict(DEFAULT_PRICES)
        self.model = model  # the policy's loop.agent.model, until the stream names one
        self.turns: dict[str, Turn] = {}
        self.reported_usd: float | None = None  # the CLI's own total (Claude's result line, its transcript's cost-state)
        # the session the lines belong to and the cwd they name (the loop's stream and an adopted loop's transcripts)
        self.session: str | None = None
        self.cwd: str | None = None
        self.codex_total = Tokens()  # Codex: the thread's running total, from any source
        self.text: list[str] = []  # what the agent said (Claude's result, Codex's agent messages)
        self.result_text: str | None = None
        self._streaming: dict[str, str] = {}  # Claude partial messages: the message in flight per (sub)agent
        self.lines = 0
        self.events = 0  # lines that parsed as one of the CLI's events
        self.results = 0  # final events seen (FINAL): the CLI said its run is over (it may still not exit)
        # the model endpoint's answers (see `endpoint_down`): failures the CLI reported, and whether the model ever
        # answered (a streamed message, a tool call, a completed turn)
        self.api_errors = 0
        self.api_error = ""  # the last one, for the evidence
        self.answered = False
        # what streamed in calls whose usage is not final yet (`estimate_open`): Claude's messages started and not
        # ended (message_delta), with the characters of their content deltas; Codex's turn started and not completed
        self._open: dict[str, int] = {}
        self._codex_open = False
        self._codex_base = Tokens()  # the running total when the open turn started
        self._codex_chars: dict[str, int] = {}  # item id -> characters of the model's words (message, reasoning)

    # -- what it knows ------------------------------------------------------------------
    @property
    def table_usd(self) -> float:
        """The turns priced from the table alone."""
        return sum(t.usd for t in self.turns.values())

    @property
    def estimated_usd(self) -> float:
        return self.table_usd * self.scale

    @property
    def usd(self) -> float:
        est = self.estimated_usd
        return max(est, self.reported_usd) if self.reported_usd is not None else est

    @property
    def estimated(self) -> int:
        """How many of the turns were estimated (0: every token was reported by the API)."""
        return sum(1 for t in self.turns.values() if t.estimated)

    def estimate_open(self, prompt_chars: int = 0) -> list[Turn]:
        """The calls a kill (a deadline, a cap, the idle timeout) or an endless stream left without their final usage,
        estimated from what streamed, at about 4 characters a token (a floor: tokenizers give 3 to 4.5 for English and
        code), priced by the table like any turn and marked `estimated`:

        - Claude (Anthropic Messages): the input is message_start's own count; the output, message_delta's count that
          never came, is the characters of the content deltas streamed (text, tool input, thinking) / 4;
        - Codex (Responses API, usage only at response.completed): a turn started and not completed is billed at least
          its request, the prompt (`prompt_chars` / 4) as input, and the words it streamed (agent messages, reasoning)
          / 4 as output, less what its calls already reported (the session file's token counts).
        Called once the stream has ended; the turns it added or raised."""
        out: list[Turn] = []
        for key, chars in list(self._open.items()):
            t = self.turns.get(key)
            if t is None:
                continue
            est = chars // 4
            if est > t.tokens.output:
                tok = Tokens(t.tokens.input, est, t.tokens.cached, t.tokens.cache_write)
                t = Turn(key, tok, tok.cost(self._price(t.model)[1]), t.model, True)
                self.turns[key] = t
                out.append(t)
        self._open.clear()
        if self._codex_open:
            got = self.codex_total
            base = self._codex_base
            rin = (got.input - base.input) + (got.cached - base.cached)
            rout = got.output - base.output
            tok = Tokens(max(0, prompt_chars // 4 - rin), max(0, sum(self._codex_chars.values()) // 4 - rout))
            if tok.total:
                name = self.model or ""
                t = Turn(f"codex-estimated-{len(self.turns) + 1}", tok, tok.cost(self._price(name)[1]), name, True)
                self.turns[t.key] = t
                out.append(t)
            self._codex_open = False
        return out

    @property
    def tokens(self) -> Tokens:
        out = Tokens()
        for t in self.turns.values():
            out = out.plus(t.tokens)
        return out

    @property
    def endpoint_down(self) -> bool:
        """The CLI only ever got 5xx / 429 / connection errors from its model endpoint: it reported at least one and
        the model never answered (no message streamed, no tool called, no turn completed). With no answer the model
        did nothing this iteration: the iteration says nothing of the agent (healer/core/endings.py MODEL_UNAVAILABLE)."""
        return self.api_errors > 0 and not self.answered

    def _api_error(self, status: object, what: object, retried: bool = False) -> None:
        """One failed request the CLI reported; counted when it is the endpoint's (5xx, 429, 408, no answer at all).
        Without a status only a request the CLI retried (it retries only those) or one whose words say the connection
        failed counts: "Not logged in" is a setup problem of the agent's, not an outage."""
        code = status if isinstance(status, int) and not isinstance(status, bool) else None
        if code is not None and not (code >= 500 or code in (408, 429)):
            return  # 4xx: a request the endpoint refused (a bad key, a bad model): not an outage
        if code is None and not retried and not _CONNECT.search(str(what or "")):
            return
        self.api_errors += 1
        self.api_error = (f"{code} " if code else "") + str(what or "")[:200]

    def _codex_error(self, msg: object) -> None:
        text = str(msg or "")
        m = _STATUS.search(text)
        if m is not None:
            self._api_error(int(m.group(1)), text)
        elif _CONNECT.search(text):
            self._api_error(None, text)

    def said(self) -> str:
        """The agent's own words, without the stream's ids, usage and timings (what output de-duplication hashes)."""
        if self.result_text is not None:
            return self.result_text
        return "\n".join(self.text)

    # -- feeding ------------------------------------------------------------------------
    def _reported(self, cost: object) -> None:
        """The CLI's own bill (used when higher than the estimate: `usd`), when it is a sane number."""
        if not isinstance(cost, bool) and isinstance(cost, (int, float)) and cost == cost and 0 <= cost < 1e6:
            self.reported_usd = max(float(cost), self.reported_usd or 0.0)

    def _where(self, obj: dict, typ: str) -> None:
        """The session id and cwd a line names: Claude Code's `sessionId`/`cwd` (each transcript line) or
        `session_id`/`cwd` (stream-json's init); Codex's session_meta `payload.id`/`payload.cwd` (its session file)
        or `thread_id` (exec --json's thread.started)."""
        raw = obj.get("payload") if typ == "session_meta" else None
        pl: dict = raw if isinstance(raw, dict) else {}
        sid = obj.get("sessionId") or obj.get("session_id") or pl.get("id") or (
            obj.get("thread_id") if typ == "thread.started" else None)
        cwd = obj.get("cwd") or pl.get("cwd")
        if self.session is None and isinstance(sid, str):
            self.session = sid
        if self.cwd is None and isinstance(cwd, str):
            self.cwd = cwd

    def feed(self, line: str | bytes) -> list[Turn]:
        self.lines += 1
        if isinstance(line, bytes):
            if len(line) > 4_000_000 or line.lstrip()[:1] != b"{":  # no event: not decoded (a flood of text is cheap)
                return []
            line = line.decode("utf-8", "replace")
        s = line.strip()
        if not s.startswith("{") or len(s) > 4_000_000:
            return []
        try:
            obj = json.loads(s)
        except ValueError:
            return []
        if not isinstance(obj, dict):
            return []
        typ = obj.get("type")
        if not isinstance(typ, str):
            msg = obj.get("msg")  # codex's older `exec --json`: {"id": ..., "msg": {"type": "token_count", ...}}
            if isinstance(msg, dict) and msg.get("type") == "token_count":
                self.events += 1
                return self._codex_total(openai_tokens(msg.get("info", {}).get("total_token_usage")
                                                       if isinstance(msg.get("info"), dict) else msg))
            return []
        self.events += 1
        if self.session is None or self.cwd is None:
            self._where(obj, typ)
        if typ == "cost-state":  # Claude Code's transcript: its own bill of the session so far
            self._reported(obj.get("totalCostUSD"))
            return []
        if typ == "system" and obj.get("subtype") == "api_retry":  # Claude Code retries a failed request
            self._api_error(obj.get("error_status"), obj.get("error"), retried=True)
            return []
        if typ == "system" and isinstance(obj.get("model"), str):
            self.model = obj["model"]
            return []
        if typ == "assistant":
            m = obj.get("message")
            if obj.get("is_api_error_message"):  # Claude Code's own message after its retries ran out
                self._api_error(obj.get("api_error_status"), obj.get("api_error_type") or obj.get("api_error")
                                or obj.get("error"))
                return []
            if isinstance(m, dict):
                if m.get("model") != "<synthetic>":
                    self.answered = True
                return self._claude_turn(m.get("id"), m.get("model"), anthropic_tokens(m.get("usage")))
            return []
        if typ == "stream_event":
            ev = obj.get("event")
            # a message_delta names no message: it belongs to the last message_start of the same (sub)agent
            who = str(obj.get("parent_tool_use_id"))
            if isinstance(ev, dict):
                if ev.get("type") == "message_start" and isinstance(ev.get("message"), dict):
                    self.answered = True
                    m = ev["message"]
                    self._streaming[who] = m.get("id") if isinstance(m.get("id"), str) else f"anon-{len(self.turns)}"
                    self._open.setdefault(self._streaming[who], 0)
                    return self._claude_turn(self._streaming[who], m.get("model"), anthropic_tokens(m.get("usage")))
                if ev.get("type") == "message_delta" and who in self._streaming:
                    # cumulative (Anthropic's streaming docs); fields it leaves out keep their message_start value
                    self._open.pop(self._streaming[who], None)  # its output count is final now
                    return self._claude_turn(self._streaming[who], None, anthropic_tokens(ev.get("usage")))
                if ev.get("type") == "content_block_delta" and who in self._streaming and isinstance(ev.get("delta"), dict):
                    d = ev["delta"]
                    n = sum(len(v) for k in ("text", "partial_json", "thinking") if isinstance(v := d.get(k), str))
                    key = self._streaming[who]
                    if key in self._open:
                        self._open[key] += n
            return []
        if typ in FINAL.get(self.preset, ()):
            self.results += 1
        if typ == "result":
            if obj.get("is_error") and (obj.get("api_error_status") is not None or obj.get("terminal_reason") == "api_error"):
                self._api_error(obj.get("api_error_status"), obj.get("api_error_type") or obj.get("result"))
            self._reported(obj.get("total_cost_usd", obj.get("cost_usd")))
            if isinstance(obj.get("result"), str):
                self.result_text = obj["result"]
            return []
        if typ == "turn.started":
            self._codex_open, self._codex_base, self._codex_chars = True, self.codex_total, {}
            return []
        if typ == "turn.completed":
            self.answered = True
            self._codex_open = False
            return self._codex_total(openai_tokens(obj.get("usage")))
        if typ == "error":  # Codex: a request that failed (its retries included)
            self._codex_error(obj.get("message"))
            return []
        if typ == "turn.failed":
            self._codex_open = False  # nothing was billed beyond what its calls reported
            e = obj.get("error")
            self._codex_error(e.get("message") if isinstance(e, dict) else e)
            return []
        if typ == "event_msg":  # a line of Codex's session file
            p = obj.get("payload")
            if isinstance(p, dict) and p.get("type") == "token_count" and isinstance(p.get("info"), dict):
                return self._codex_total(openai_tokens(p["info"].get("total_token_usage")))
            return []
        if typ == "turn_context":  # Codex's session file names the model
            p = obj.get("payload")
            if isinstance(p, dict) and isinstance(p.get("model"), str):
                self.model = p["model"]
            return []
        if typ in ("item.started", "item.updated", "item.completed"):
            it = obj.get("item")
            if isinstance(it, dict) and it.get("type") not in (None, "error"):  # Codex's own notices are no answer
                self.answered = True
                if it.get("type") in ("agent_message", "reasoning") and isinstance(it.get("text"), str):
                    k = str(it.get("id"))
                    self._codex_chars[k] = max(self._codex_chars.get(k, 0), len(it["text"]))
            if typ == "item.completed" and isinstance(it, dict) and it.get("type") == "agent_message" \
                    and isinstance(it.get("text"), str):
                self.text.append(it["text"])
        return []

    def _price(self, model: str | None) -> tuple[str, Price]:
        return price_for(model or self.model, self.table, self.preset)

    def _claude_turn(self, mid: object, model: object, tok: Tokens | None) -> list[Turn]:
        if tok is None:
            return []
        key = mid if isinstance(mid, str) and mid else f"anon-{len(self.turns)}"
        model = model if isinstance(model, str) and model else None
        old = self.turns.get(key)
        merged = tok if old is None else old.tokens.merge_max(tok)
        if old is not None and merged == old.tokens:
            return []
        name = model or (old.model if old else None) or self.model or ""
        t = Turn(key, merged, merged.cost(self._price(name)[1]), name)
        self.turns[key] = t
        return [t]

    def _codex_total(self, tok: Tokens | None) -> list[Turn]:
        """A running total (turn.completed, token_count): the growth since the last one is a new turn."""
        if tok is None:
            return []
        total = self.codex_total.merge_max(tok)
        if total == self.codex_total:
            return []
        delta = Tokens(total.input - self.codex_total.input, total.output - self.codex_total.output,
                       total.cached - self.codex_total.cached, total.cache_write - self.codex_total.cache_write)
        self.codex_total = total
        name = self.model or ""
        t = Turn(f"codex-{len(self.turns) + 1}", delta, delta.cost(self._price(name)[1]), name)
        self.turns[t.key] = t
        return [t]


def calibrate(meter: Meter, scale: float = 1.0) -> float:
    """The factor the next iterations' estimates are raised by: the CLI billed more than the table says (a model
    newer than the table, a price rise). Only ever up, and only from the CLI's own bill of the same turns."""
    if meter.reported_usd is None or meter.table_usd <= 0:
        return scale
    return min(max(scale, meter.reported_usd / meter.table_usd), 100.0)


class LineBuffer:
    """Bytes in, whole lines out (a line split across reads is kept until its end arrives)."""

    def __init__(self, cap: int = 4_000_000) -> None:
        self.buf = bytearray()  # grown in place: a flood without newlines costs no copy per read
        self.cap = cap  # a line longer than this is dropped (it is no usage line)

    def push(self, data: bytes) -> list[bytes]:
        self.buf += data
        if b"\n" not in data:
            if len(self.buf) > self.cap:
                self.buf = bytearray()
            return []
        *lines, rest = bytes(self.buf).split(b"\n")
        self.buf = bytearray(rest)
        return lines

    def flush(self) -> list[bytes]:
        rest, self.buf = bytes(self.buf), bytearray()
        return [rest] if rest.strip() else []
