"""Each daemon exports only its own metrics (issue 41): Prometheus scraping `dispatch` and `supervise` must not see
main_red 0 from one and 1 from the other."""

from __future__ import annotations

from healer.metrics import Metrics


def test_dispatch_exports_no_supervisor_gauge_and_supervise_no_dispatcher_counter():
    dispatch, supervise, up = Metrics("dispatch").render(), Metrics("supervise").render(), Metrics("up").render()
    assert "healer_sentinel_state" not in dispatch and "healer_findings" not in dispatch
    assert "healer_dispatch_passes_total" in dispatch and "healer_last_dispatch_timestamp_seconds" in dispatch
    assert 'healer_sentinel_state{sentinel="main_red",state="ok"} 1.0' in supervise
    assert "healer_dispatch_passes" not in supervise
    assert "healer_sentinel_state" in up and "healer_dispatch_passes_total" in up  # `up` runs both
    for body in (dispatch, supervise, up):
        assert "healer_daemon_info" in body and "healer_store_up" in body


def test_a_hook_of_the_other_daemon_is_harmless():
    m = Metrics("dispatch")
    m.ticks.inc()  # registered nowhere: counted, never exported
    assert "healer_ticks" not in m.render()
