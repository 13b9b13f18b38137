"""healer/loop/usage.py: the CLIs' streams turned into usage per API turn, and the loop-shape rules of decide.py.

The transcripts below (but the recorded ones at the end: Claude Code 2.1.332, Codex 0.171.0, in
tests/loop/transcripts/) are written from the documented formats (Claude Code's stream-json as its
`--output-format stream-json --verbose` prints it, one assistant line per content block with the message id
and usage repeated; codex-rs/exec/src/exec_events.rs and event_processor_with_jsonl_output.rs for
`codex exec --json`; Codex's session file's `token_count` events), not recorded from the real CLIs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from healer.loop import decide, usage
from healer.loop.decide import Facts, GateResult, IterationRecord, Limits

CLAUDE = [
    {"type": "system", "subtype": "init", "cwd": "/w", "session_id": "9f1c", "model": "claude-sonnet-4-5-20250929",
     "tools": ["Bash", "Edit", "Read"], "permissionMode": "acceptEdits", "apiKeySource": "ANTHROPIC_API_KEY"},
    {"type": "assistant", "message": {"id": "msg_01A", "type": "message", "role": "assistant",
                                      "model": "claude-sonnet-4-5-20250929",
                                      "content": [{"type": "text", "text": "Let me look at the failing test."}],
                                      "stop_reason": None, "usage": {"input_tokens": 3, "cache_creation_input_tokens": 12000,
                                                                     "cache_read_input_tokens": 0, "output_tokens": 1}},
     "parent_tool_use_id": None, "session_id": "9f1c"},
    {"type": "assistant", "message": {"id": "msg_01A", "type": "message", "role": "assistant",
                                      "model": "claude-sonnet-4-5-20250929",
                                      "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                                   "input": {"command": "pytest -q"}}],
                                      "stop_reason": None, "usage": {"input_tokens": 3, "cache_creation_input_tokens": 12000,
                                                                     "cache_read_input_tokens": 0, "output_tokens": 120}},
     "parent_tool_use_id": None, "session_id": "9f1c"},
    {"type": "user", "message": {"role": "user", "content": [{"tool_use_id": "toolu_1", "type": "tool_result",
                                                              "content": "1 failed", "is_error": False}]},
     "parent_tool_use_id": None, "session_id": "9f1c"},
    {"type": "assistant", "message": {"id": "msg_01B", "type": "message", "role": "assistant",
                                      "model": "claude-sonnet-4-5-20250929",
                                      "content": [{"type": "text", "text": "Fixed add(); done."}],
                                      "stop_reason": None, "usage": {"input_tokens": 5, "cache_creation_input_tokens": 300,
                                                                     "cache_read_input_tokens": 12000, "output_tokens": 40}},
     "parent_tool_use_id": None, "session_id": "9f1c"},
    {"type": "result", "subtype": "success", "is_error": False, "duration_ms": 8123, "duration_api_ms": 7001,
     "num_turns": 3, "result": "Fixed add(); done.", "session_id": "9f1c", "total_cost_usd": 0.0521,
     "usage": {"input_tokens": 8, "output_tokens": 160}},
]

CODEX = [
    {"type": "thread.started", "thread_id": "0199a213-81c0-7800-8aa1-bbab2a035a53"},
    {"type": "turn.started"},
    {"type": "item.completed", "item": {"id": "item_0", "type": "reasoning", "text": "**Running the tests**"}},
    {"type": "item.started", "item": {"id": "item_1", "type": "command_execution", "command": "bash -lc 'pytest -q'",
                                      "aggregated_output": "", "exit_code": None, "status": "in_progress"}},
    {"type": "item.completed", "item": {"id": "item_1", "type": "command_execution", "command": "bash -lc 'pytest -q'",
                                        "aggregated_output": "1 failed", "exit_code": 1, "status": "completed"}},
    {"type": "item.completed", "item": {"id": "item_2", "type": "file_change",
                                        "changes": [{"path": "calc.py", "kind": "update"}], "status": "completed"}},
    {"type": "item.completed", "item": {"id": "item_3", "type": "agent_message", "text": "Fixed add() in calc.py."}},
    {"type": "turn.completed", "usage": {"input_tokens": 24763, "cached_input_tokens": 24448, "output_tokens": 122}},
]


def lines(objs) -> list[str]:
    return [json.dumps(o) for o in objs]


def test_claude_stream_counts_each_message_id_once_at_its_largest():
    m = usage.Meter("claude")
    changed = [len(m.feed(ln)) for ln in lines(CLAUDE)]
    assert changed == [0, 1, 1, 0, 1, 0]  # the second line of msg_01A only grew its output tokens
    assert set(m.turns) == {"msg_01A", "msg_01B"} and m.model == "claude-sonnet-4-5-20250929"
    a = m.turns["msg_01A"].tokens
    assert (a.input, a.output, a.cache_write, a.cached) == (3, 120, 12000, 0)
    p = usage.DEFAULT_PRICES["claude-sonnet-4"]
    est = (8 * p.input + 160 * p.output + 12300 * p.cache_write + 12000 * p.cached_input) / 1e6
    assert m.estimated_usd == pytest.approx(est)
    assert m.reported_usd == 0.0521 and m.usd == max(est, 0.0521)
    assert m.said() == "Fixed add(); done."


def test_a_killed_claude_stream_keeps_what_its_turns_reported():
    m = usage.Meter("claude")
    for ln in lines(CLAUDE[:3]):  # killed after the first API call's tool use
        m.feed(ln)
    assert m.reported_usd is None and m.usd > 0 and len(m.turns) == 1


def _ev(event: dict, parent=None) -> str:
    return json.dumps({"type": "stream_event", "event": event, "parent_tool_use_id": parent, "session_id": "s",
                       "uuid": "u"})


def test_claude_partial_messages_stream_events_per_subagent():
    m = usage.Meter("claude")
    m.feed(_ev({"type": "message_start", "message": {"id": "msg_X", "model": "claude-opus-4-5-20251101",
                                                     "usage": {"input_tokens": 1000, "output_tokens": 1}}}))
    # a subagent (Task tool) streams its own call in between
    m.feed(_ev({"type": "message_start", "message": {"id": "msg_S", "model": "claude-haiku-4-5",
                                                     "usage": {"input_tokens": 50, "output_tokens": 1}}}, "toolu_T"))
    m.feed(_ev({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}))
    m.feed(_ev({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 900}}))
    m.feed(_ev({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 7}}, "toolu_T"))
    x, s = m.turns["msg_X"], m.turns["msg_S"]
    assert x.tokens.output == 900 and x.usd == pytest.approx((1000 * 5 + 900 * 25) / 1e6)  # opus 4.5, not opus 4
    assert (s.tokens.input, s.tokens.output) == (50, 7) and s.usd == pytest.approx((50 * 1 + 7 * 5) / 1e6)
    # the complete assistant line that follows repeats message_start's usage: nothing counted twice
    m.feed(json.dumps({"type": "assistant", "message": {"id": "msg_X", "usage": {"input_tokens": 1000,
                                                                                 "output_tokens": 1}}}))
    assert len(m.turns) == 2 and m.turns["msg_X"].tokens.output == 900
    assert m.feed(_ev({"type": "message_delta", "usage": {"output_tokens": 5}}, "never-started")) == []


def test_codex_jsonl_turn_completed_priced_and_its_words_kept():
    m = usage.Meter("codex", usage.price_table({}), model="gpt-5-codex")
    for ln in lines(CODEX):
        m.feed(ln)
    (t,) = m.turns.values()
    assert (t.tokens.input, t.tokens.cached, t.tokens.output) == (24763 - 24448, 24448, 122)
    assert t.usd == pytest.approx((315 * 1.25 + 24448 * 0.125 + 122 * 10) / 1e6)
    assert m.said() == "Fixed add() in calc.py."
    assert m.events == len(CODEX)


def test_codex_session_file_token_counts_are_a_running_total():
    m = usage.Meter("codex")
    for total in (1000, 1000, 2500):  # a repeated count (rate-limit refresh) adds nothing
        m.feed(json.dumps({"type": "event_msg", "payload": {"type": "token_count", "info": {
            "total_token_usage": {"input_tokens": total, "cached_input_tokens": 0, "output_tokens": 10}}}}))
    assert [t.tokens.input for t in m.turns.values()] == [1000, 1500]
    # then stdout's turn.completed with the same total: nothing counted twice
    assert m.feed(json.dumps({"type": "turn.completed", "usage": {"input_tokens": 2500, "cached_input_tokens": 0,
                                                                  "output_tokens": 10}})) == []
    assert m.tokens.input == 2500


def test_prices_longest_prefix_policy_star_then_preset_default():
    table = usage.price_table({"house": {"input": 2, "output": 8}})
    assert usage.price_for("claude-opus-4-5-20251101", table)[0] == "claude-opus-4-5"
    assert usage.price_for("claude-opus-4-1-20250805", table)[0] == "claude-opus-4"
    assert usage.price_for("house-model-7", table)[1] == usage.Price(2.0, 8.0)
    assert usage.price_for("mystery", table, "codex")[0] == "gpt-5"  # a dollar cap always applies
    assert usage.price_for("mystery", usage.price_table({"*": {"input": 9, "output": 9}}), "codex")[0] == "*"


def test_garbage_lines_count_nothing():
    m = usage.Meter("claude")
    for ln in ["", "plain words", "{not json", "[1,2]", json.dumps({"type": "assistant", "message": "x"}),
               json.dumps({"type": "assistant", "message": {"id": "m", "usage": {"input_tokens": -5,
                                                                                 "output_tokens": True}}}),
               json.dumps({"type": "result", "total_cost_usd": float("nan")}) .replace("NaN", "1e999")]:
        m.feed(ln)
    assert m.usd == 0.0


def test_line_buffer_joins_split_lines():
    b = usage.LineBuffer()
    assert b.push(b'{"a":') == [] and b.push(b'1}\n{"b"') == [b'{"a":1}'] and b.flush() == [b'{"b"']


# -- output de-duplication keeps meaning ----------------------------------------------------------------


def test_output_key_keeps_progress_numbers_and_drops_volatile_parts():
    assert decide.output_key("3 of 5 tests pass") != decide.output_key("4 of 5 tests pass")
    assert decide.output_key("done (step 1)") != decide.output_key("done (step 2)")
    assert decide.output_key("done at 12:00:01 in 0.52s, pid 4242") == decide.output_key("done at 13:10:09 in 1.5s, pid 7")


# -- loop shape: cycles of states ------------------------------------------------------------------------

RED = (GateResult("tests", 1),)


def recs(states: list[str]) -> list[IterationRecord]:
    return [IterationRecord(n=i + 1, tree_hash=s, state_hash=s, gates=RED, signature=f"sig-{i}")
            for i, s in enumerate(states)]


def test_flip_flop_and_three_cycle_stop_as_stalled_naming_the_cycle():
    lim = Limits(max_iterations=20, same_state=2, same_failure=99)
    v = decide.decide(recs(list("xABAB")), lim, 0, Facts())
    assert v.exit_code == 3 and "period 2" in v.reason and "A-B-A-B" in v.reason
    assert decide.decide(recs(list("ABA")), lim, 0, Facts()).go_on  # one return is not a cycle
    v = decide.decide(recs(list("ABCABC")), lim, 0, Facts())
    assert v.exit_code == 3 and "period 3" in v.reason
    assert decide.decide(recs(list("ABCABC")), Limits(cycle_window=0, same_failure=99), 0, Facts()).go_on


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 30), st.integers(0, 16))
def test_a_converging_sequence_is_never_a_cycle(n, window):
    assert decide.state_cycle([f"s{i}" for i in range(n)], window) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text("abcdef", min_size=1, max_size=3), max_size=6, unique=True), st.integers(2, 6),
       st.integers(4, 12), st.data())
def test_a_period_k_cycle_is_caught_at_its_second_round(prefix, k, window, data):
    """After converging steps (all new states), an agent enters a k-cycle: caught exactly when the cycle has
    gone round twice (k <= window/2), with its true period; never earlier."""
    period = data.draw(st.lists(st.text("ABCDEFGH", min_size=1, max_size=2), min_size=k, max_size=k, unique=True))
    seq = prefix + period * 3
    found_at = next((i for i in range(1, len(seq) + 1) if decide.state_cycle(seq[:i], window)), None)
    if 2 * k <= window:
        assert found_at == len(prefix) + 2 * k
        assert decide.state_cycle(seq[:found_at], window)[0] == k
    else:
        assert found_at is None  # longer than the window can see: the iteration cap ends it


# -- the supervisor's spend-rate alarm (healer/core/sentinels.py) ------------------------------------------


def test_spend_rate_fires_when_the_window_sum_goes_over_and_names_the_top_run():
    from healer.core.sentinels import spend_rate

    now = 10_000.0
    spend = [(now - 4000, "old", 500.0), (now - 3000, "a", 20.0), (now - 2000, "b", 20.0), (now - 100, "a", 15.0)]
    f = spend_rate(spend, now, 50.0, 3600.0)  # the $500 of two hours ago is outside the window
    assert f is not None and f.kind == "spend_rate" and f.since == now - 100
    assert f.evidence["spent_usd"] == 55.0 and f.evidence["top_run"] == "a" and f.evidence["top_run_usd"] == 35.0
    assert spend_rate(spend, now, 60.0, 3600.0) is None
    assert spend_rate([], now, 0.01, 3600.0) is None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.integers(0, 10**6), st.integers(0, 10**6))
def test_a_converging_agents_progress_counts_never_make_a_duplicate(text, a, b):
    """Two reports that differ in a count are two outputs, whatever surrounds them."""
    ka = decide.output_key(f"{text}\nprogress: {a} of 1000000 steps done")
    kb = decide.output_key(f"{text}\nprogress: {b} of 1000000 steps done")
    assert (ka == kb) == (a == b)


# -- recorded from the real CLI ------------------------------------------------------------------------------

TRANSCRIPTS = Path(__file__).with_name("transcripts")


def test_recorded_claude_code_transcript_priced_as_claude_bills_it():
    """Recorded from Claude Code 2.1.332 (`claude -p --output-format stream-json --verbose
    --include-partial-messages --permission-mode acceptEdits --allowedTools Bash`) against a scripted Messages
    server on 127.0.0.1 (two API calls: text + Bash tool use, then text; cache writes and reads). The assistant
    lines say output_tokens 1; the message_delta stream events carry 300 and 700; Claude's own bill is $0.05505."""
    lines = (TRANSCRIPTS / "claude-2.1.332-stream-json.jsonl").read_text().splitlines()
    m = usage.Meter("claude")
    result_at = next(i for i, ln in enumerate(lines) if json.loads(ln)["type"] == "result")
    for ln in lines[:result_at]:  # before the result line: what a kill just before the end would leave
        m.feed(ln)
    assert set(m.turns) == {"msg_main_1", "msg_main_2"}
    assert [m.turns[k].tokens.output for k in ("msg_main_1", "msg_main_2")] == [300, 700]
    assert m.reported_usd is None and m.usd == pytest.approx(0.05505)  # the estimate alone is Claude's bill
    m.feed(lines[result_at])
    assert m.reported_usd == pytest.approx(0.05505) and m.usd == pytest.approx(0.05505)
    assert m.said() == "Wrote hi.txt. Done."


def test_recorded_codex_exec_json_and_session_file():
    """Recorded from Codex 0.171.0 (`codex exec --json`, a custom `responses` provider on 127.0.0.1, two API calls:
    20,000 input / 4,000 cached / 300 output, then 21,000 / 20,000 / 700). stdout gives the thread's total once,
    at turn.completed; the session file (trimmed to its token counts and the model) one running total per call."""
    price = usage.DEFAULT_PRICES["gpt-5"]
    total = (17000 * price.input + 24000 * price.cached_input + 1000 * price.output) / 1e6
    out = usage.Meter("codex")
    for ln in (TRANSCRIPTS / "codex-0.171.0-exec-json.jsonl").read_text().splitlines():
        out.feed(ln)
    assert out.usd == pytest.approx(total) and out.said() == "Wrote hi.txt. Done."
    # the session file alone, cut after the first call (a kill mid-turn): that call is counted
    ses = (TRANSCRIPTS / "codex-0.171.0-session-trimmed.jsonl").read_text().splitlines()
    first = next(i for i, ln in enumerate(ses) if '"token_count"' in ln)
    m = usage.Meter("codex")
    for ln in ses[:first + 1]:
        m.feed(ln)
    assert m.model == "gpt-5-codex"
    assert m.usd == pytest.approx((16000 * price.input + 4000 * price.cached_input + 300 * price.output) / 1e6)
    for ln in ses[first + 1:]:
        m.feed(ln)
    for ln in (TRANSCRIPTS / "codex-0.171.0-exec-json.jsonl").read_text().splitlines():
        m.feed(ln)  # both sources, as the runner reads them: the same total, never twice
    assert m.usd == pytest.approx(total) and len(m.turns) == 2


def test_the_clis_own_bill_raises_later_estimates_never_lowers_them():
    line = json.dumps({"type": "assistant", "message": {"id": "m1", "model": "claude-opus-9",
                                                        "usage": {"input_tokens": 100_000, "output_tokens": 0}}})
    m = usage.Meter("claude")
    m.feed(line)
    assert m.usd == pytest.approx(0.30)  # an unknown Claude model: Sonnet's price
    m.feed(json.dumps({"type": "result", "total_cost_usd": 0.40}))
    scale = usage.calibrate(m)
    assert scale == pytest.approx(4 / 3)
    nxt = usage.Meter("claude", scale=scale)
    nxt.feed(line)  # killed before its result line: priced as the CLI would bill it
    assert nxt.usd == pytest.approx(0.40)
    cheaper = usage.Meter("claude")
    cheaper.feed(line)
    cheaper.feed(json.dumps({"type": "result", "total_cost_usd": 0.01}))
    assert usage.calibrate(cheaper, scale) == scale and usage.calibrate(usage.Meter("codex"), 2.0) == 2.0


def test_an_endpoint_that_only_failed_is_told_from_one_that_answered_after_retries():
    """Claude Code's api_retry events and its synthetic error message, Codex's error / turn.failed (issue 40)."""
    import json as _j

    down = usage.Meter("claude")
    for o in ({"type": "system", "subtype": "api_retry", "attempt": 1, "error_status": 529, "error": "overloaded"},
              {"type": "system", "subtype": "api_retry", "attempt": 2, "error_status": None, "error": "connection_error"},
              {"type": "assistant", "is_api_error_message": True, "api_error_status": 529,
               "message": {"id": "x", "model": "<synthetic>", "usage": {"input_tokens": 0, "output_tokens": 0}}},
              {"type": "result", "is_error": True, "api_error_status": 529, "terminal_reason": "api_error"}):
        down.feed(_j.dumps(o))
    assert down.endpoint_down and down.api_errors == 4
    back = usage.Meter("claude")
    back.feed(_j.dumps({"type": "system", "subtype": "api_retry", "error_status": 500, "error": "api_error"}))
    back.feed(_j.dumps({"type": "stream_event", "event": {"type": "message_start", "message": {
        "id": "m", "model": "claude-sonnet-4-5", "usage": {"input_tokens": 9, "output_tokens": 1}}}}))
    assert back.api_errors == 1 and not back.endpoint_down
    refused = usage.Meter("claude")  # a 401 is a refusal (a bad key), not an outage
    refused.feed(_j.dumps({"type": "system", "subtype": "api_retry", "error_status": 401, "error": "auth"}))
    assert not refused.endpoint_down
    login = usage.Meter("claude")  # not logged in: no status, no connection words: the agent's setup, not an outage
    login.feed(_j.dumps({"type": "assistant", "is_api_error_message": True, "error": "authentication_failed",
                         "message": {"id": "x", "model": "<synthetic>", "content": []}}))
    login.feed(_j.dumps({"type": "result", "is_error": True, "terminal_reason": "api_error",
                         "result": "Not logged in · Please run /login"}))
    assert not login.endpoint_down
    refused_port = usage.Meter("claude")  # connection refused, as Claude Code 2.1.332 says it
    for o in ({"type": "system", "subtype": "api_retry", "error_status": None, "error": "unknown"},
              {"type": "assistant", "is_api_error_message": True, "error": "server_error", "api_error": "connection_failed"}):
        refused_port.feed(_j.dumps(o))
    assert refused_port.endpoint_down and refused_port.api_errors == 2
    cx = usage.Meter("codex")
    for o in ({"type": "item.completed", "item": {"id": "0", "type": "error", "message": "Model metadata not found"}},
              {"type": "turn.started"},
              {"type": "error", "message": "exceeded retry limit, last status: 429 Too Many Requests"},
              {"type": "turn.failed", "error": {"message": "stream disconnected before completion: error sending request"}}):
        cx.feed(_j.dumps(o))
    assert cx.endpoint_down and cx.api_errors == 2 and cx.estimate_open(4000) == []
