"""healer.clock's time formats are datetime's, to the character (it renders them without importing datetime)."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from healer.clock import day_of, iso, stamp

# years 1000..9999: below 1000 the platform's strftime and isoformat pad differently, and no store holds those
EPOCHS = st.floats(min_value=-30_610_224_000.0, max_value=253_402_300_799.0, allow_nan=False)


def _dt(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, tz=dt.UTC)


@given(EPOCHS)
def test_the_three_formats_are_datetimes(t: float) -> None:
    assert iso(t) == _dt(t).isoformat(timespec="seconds")
    assert stamp(t) == _dt(t).strftime("%Y%m%dT%H%M%S.%fZ")
    assert day_of(t) == _dt(t).strftime("%Y-%m-%d")


@pytest.mark.parametrize("t", [0.0, -0.0000004, -0.0000005, -0.0000006, 0.9999995, 0.9999994, 1.9999999, -1.5,
                               1_700_000_000.4999995, 1_700_000_000.0000005, 86_399.9999996, -86_400.0000004,
                               253_402_300_799.0])
def test_rounding_at_the_microsecond_and_the_day(t: float) -> None:
    assert stamp(t) == _dt(t).strftime("%Y%m%dT%H%M%S.%fZ")
    assert iso(t) == _dt(t).isoformat(timespec="seconds")
    assert day_of(t) == _dt(t).strftime("%Y-%m-%d")


@pytest.mark.parametrize("t", [float("nan"), float("inf"), 1e20, -1e20])
def test_what_datetime_refuses_is_refused(t: float) -> None:
    with pytest.raises((ValueError, OverflowError)):
        _dt(t)
    with pytest.raises((ValueError, OverflowError)):
        iso(t)
