"""The loader never lets anything but InvalidInput escape; durations round-trip."""

from __future__ import annotations

import re

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from healer import durations
from healer.errors import InvalidInput
from healer.policy import Policy, validate_text
from healer.policy.load import _model_in

LINE = re.compile(r"^f\.yaml:\d+:\d+: \S+: expected .*, got .*$")


def _keys(model: type[BaseModel], out: set[str]) -> set[str]:
    for name, f in model.model_fields.items():
        out.add(f.alias or name)
        sub = _model_in(f.annotation)
        if sub is not None and sub.__name__ not in {m.__name__ for m in ()}:
            if sub is not model:
                _keys(sub, out)
    return out


KEYS = sorted(_keys(Policy, set()))
DURATIONS = st.sampled_from(["90s", "30m", "1h30m", "24h", "0s", "soon", "-5m", "10y", "1.5h", "500ms"])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20), DURATIONS, st.sampled_from(["notify", "flag", "stop", "command", "main_red", "webhook"]),
)
KEY = st.one_of(st.sampled_from(KEYS), st.text(min_size=1, max_size=8))
SHAPED = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEY, inner, max_size=5)),
    max_leaves=25,
)
POLICYISH = st.dictionaries(st.sampled_from(KEYS), SHAPED, max_size=6)


def _check(text: str | bytes) -> None:
    try:
        p = validate_text(text, "f.yaml")
    except InvalidInput as e:
        assert e.lines, "InvalidInput without lines"
        for line in e.lines:
            assert "\n" not in line
            assert LINE.match(line), line
        return
    assert isinstance(p, Policy)
    # what validates must also print and re-validate (policy show)
    again = validate_text(yaml.safe_dump(p.model_dump(mode="json", by_alias=True)), "f.yaml")
    assert again == p


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_arbitrary_text_never_escapes(text):
    _check(text)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_escape(raw):
    _check(raw)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(POLICYISH)
def test_yaml_shaped_data_never_escapes(data):
    _check(yaml.safe_dump(data, allow_unicode=True))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["loop", "retry", "health"]), st.dictionaries(st.sampled_from(KEYS), SHAPED, max_size=4), max_size=3))
def test_sections_with_real_keys_never_escape(data):
    _check(yaml.safe_dump(data, allow_unicode=True))


@given(st.integers(min_value=0, max_value=10**7), st.integers(min_value=0, max_value=999))
def test_duration_format_parse_round_trip(seconds, ms):
    value = seconds + ms / 1000
    assert durations.parse(durations.format(value)) == value


@given(st.integers(0, 500), st.integers(0, 59), st.integers(0, 59))
def test_duration_parse_of_written_forms(h, m, s):
    text = (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{s}s" if s or not (h or m) else "")
    assert durations.parse(text) == h * 3600 + m * 60 + s
    assert durations.format(durations.parse(text)) == text


def test_duration_examples():
    assert [durations.parse(x) for x in ("90s", "30m", "1h30m", "24h")] == [90, 1800, 5400, 86400]
    assert durations.format(5400) == "1h30m"
    for bad in ("", "5", "5 minutes", "-1s", "1y", True, None, float("nan"), 10**400):
        try:
            durations.parse(bad)
        except ValueError as e:
            assert str(e).startswith("expected")
        else:
            raise AssertionError(f"{bad!r} parsed")
