"""report.html's drawing (chaos/html_report.py): faults labelled by name, condition bands, a clock-time axis,
and a page that stays small (no script inlined). The real page in headless chromium: tests/interop/test_reports.py."""

from __future__ import annotations

from chaos import html_report as hr

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


def _timeline(n_tickets: int = 3):
    tl = [(0.0, "ticket.moved", f"T-{i}", "queued -> in_progress by dispatch (launch)") for i in range(n_tickets)]
    tl += [(900.0, "chaos.fault", "red_main", "fault red_main"), (900.0, "main.red", "main", "commit=abc"),
           (901.0, "dispatch.paused", "dispatch.paused", "value=True"), (901.0, "intent.done", "dispatch", "pause_dispatch done"),
           (1200.0, "chaos.fault_not_applied", "frozen_dispatch", "fault frozen_dispatch NOT APPLIED (failed): no live dispatcher"),
           (6300.0, "chaos.fault", "green_main", "fault green_main"), (6300.0, "main.green", "main", "red_for=5400"),
           (6301.0, "dispatch.unpaused", "dispatch.paused", "value=False"),
           (7000.0, "store.unavailable", "store", "error=x")]
    tl += [(7200.0, "ticket.moved", f"T-{i}", "in_progress -> done by dispatch (merged)") for i in range(n_tickets)]
    return tl


def test_bands_open_and_close_on_their_events_and_one_left_open_ends_at_the_span():
    assert hr.bands(_timeline(), 9000.0) == [("main red", "#eb5757", 900.0, 6300.0),
                                             ("dispatch paused", "#f2994a", 901.0, 6301.0),
                                             ("store away", "#7f8c8d", 7000.0, 9000.0)]


def test_faults_are_named_and_one_not_applied_says_so():
    fs = hr.faults(_timeline())
    assert [(f.name, f.applied) for f in fs] == [("red_main", True), ("frozen_dispatch", False), ("green_main", True)]
    tl = _timeline()
    lanes, bars, marks, _ = hr.swimlanes(tl, 9000.0)
    svg = hr.chart(lanes, bars, marks, 9000.0, T0, "t", fault_list=fs, band_list=hr.bands(tl, 9000.0))
    assert "⚡ red_main</text>" in svg and "⚡ frozen_dispatch (not applied)</text>" in svg
    assert ">main red</text>" in svg and ">dispatch paused</text>" in svg and ">store away</text>" in svg
    # the axis: clock time (UTC) with the time since the start under it
    assert "clock from 2023-11-14 22:13:20 UTC" in svg and ">22:13:20</text>" in svg and ">+0s</text>" in svg
    assert ">22:43:20</text>" in svg and ">+30m00s</text>" in svg


def test_a_big_scenario_page_stays_under_a_megabyte():
    from types import SimpleNamespace as NS

    tl = _timeline(60)
    tl += [(10.0 * i, "dispatch.launched", f"T-{i % 60}", "agent=x, attempt=1, pid=1") for i in range(400)]
    sc = NS(name="big", mode="simulated", seed=1, disable_breaks=[])
    r = NS(scenario=sc, timeline=tl, span=28800.0, started=T0, clock_start=T0, ok=True, status="passed", checks=[],
           seed=1, disabled=False, wall=3.0, error=None)
    page = hr.scenarios([r])
    assert len(page.encode()) <= 1_000_000 and "<script" not in page
    assert page.count("<svg class='timeline'") == 1 and "simulated clock (UTC) from 2023-11-14 22:13:20 UTC" in page


def test_a_chaos_toolkit_experiment_draws_each_activity_as_a_named_bar_on_the_clock():
    act = lambda name, s, e, st="succeeded": {"activity": {"name": name, "type": "action"}, "status": st,  # noqa: E731
                                               "start": s, "end": e, "output": None}
    j = {"experiment": {"title": "heal a frozen ticket"}, "start": "2026-12-05T01:00:00+00:00", "duration": 40,
         "status": "completed", "deviated": False,
         "steady_states": {"before": {"probes": [dict(act("healthy", "2026-12-05T01:00:00", "2026-12-05T01:00:01"),
                                                      tolerance_met=True)]}},
         "run": [act("freeze a ticket", "2026-12-05T01:00:01", "2026-12-05T01:00:30")], "rollbacks": []}
    page = hr.experiments([j])
    assert ">freeze a ticket</text>" in page and "clock from 2026-12-05 01:00:00 UTC" in page and ">01:00:00</text>" in page
