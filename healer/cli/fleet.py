"""CLI: the reference fleet — `healer dispatch`, `healer status`, `healer watch` (docs/fleet.md, README "Commands")."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import typer
from rich.table import Table

from healer.cli import watching
from healer.cli.common import (
    JsonOpt,
    PolicyOpt,
    RootOpt,
    console,
    end_leftovers,
    exit_if_interrupted,
    on_ctrl_c,
    policy_for,
    print_json,
    require_fleet,
    store_awaited,
)
from healer.cli.watching import IntervalOpt, WatchOpt
from healer.clock import iso, system
from healer.errors import HealerError, InvalidInput, UsageError
from healer.spend import usd
from healer.store import open_store


def _policy_path(root: Path, policy: Path | None) -> Path | None:
    if policy is not None:
        return policy.resolve()
    local = root / "healer.yaml"
    return local if local.exists() else None


def dispatch(
    once: bool = typer.Option(False, "--once", help="Run one dispatch pass and exit (agents keep running)."),
    root: Path = RootOpt,
    policy: Path = PolicyOpt,
    as_json: bool = JsonOpt,
    metrics_port: int = typer.Option(None, "--metrics-port", min=1, max=65535,
                                     help="Serve Prometheus metrics on 127.0.0.1:PORT/metrics."),
) -> None:
    """Take queued tickets in priority and blocked_by order and run a governed loop on each, within the pool."""
    from healer.fleet.dispatcher import (  # lazy: pulls pydantic…: 285 ms of `healer --help`
        Dispatcher,
        install_signal_handlers,
        preflight,
    )

    r = require_fleet(root)
    pol = policy_for(r, policy)
    from healer.metrics import SpendFeed  # lazy: pulls pydantic, prometheus_client: 137 ms of `healer --help`
    from healer.metrics import start as start_metrics  # lazy: with SpendFeed above (0.1 ms more)

    metrics, server = start_metrics(metrics_port, "dispatch")
    feed = SpendFeed()  # healer_spend_usd_total and its kin: read from the log after each pass
    end_leftovers(r, pol)  # before anything starts: what killed runs left (frozen groups included) is ended first
    store = _store_or_stopped(r, pol.store.outage_tolerance, server)  # away at start: ridden out as one lost later
    d = Dispatcher(r, pol, store, policy_path=_policy_path(r, policy))
    preflight(pol)
    from healer.notify import outbox  # lazy: pulls pydantic, networkx…: 292 ms of `healer --help`
    from healer.notify.outbox import ONCE_DEADLINE  # lazy: with outbox above (0.2 ms more)

    courier = None
    interrupted: list[int] = []
    try:
        if once:
            try:
                rep = d.tick()
            finally:
                d.release()  # a one-shot pass leaves no lease behind: its agents outlive it on purpose
            if not rep.skipped:  # after the pass, never inside it: one try per owed notification (main red, needs human)
                c = outbox.Courier(store, pol, metrics=metrics)
                c.drain_once(ONCE_DEADLINE)
                c.stop()
            if rep.skipped:
                raise HealerError(f"dispatch: {rep.skipped}", 4)
            if as_json:
                print_json(_report(rep))
            else:
                typer.echo(_line(rep))
            if rep.plan and rep.plan.cycles:
                raise InvalidInput(f"dispatch: {rep.plan.cycle_line()}; these tickets are not launched, the rest are served")
            return
        install_signal_handlers(d)
        interrupted = on_ctrl_c(d.stop)  # Ctrl-C: exit 4, as `healer up`
        seen: dict[str, str] = {"cycles": ""}

        def on_tick(rep) -> None:
            if metrics is not None:
                metrics.dispatched(rep)
                feed.update(store, metrics)
            line = rep.plan.cycle_line() if rep.plan else ""
            if line and line != seen["cycles"]:
                sys.stderr.write(f"healer: dispatch: {line}; these tickets are not launched, the rest are served\n")
            seen["cycles"] = line
            if as_json:
                typer.echo(__import__("json").dumps(_report(rep), default=str))
            elif rep.launched or rep.reaped or rep.merged or rep.rejected or rep.stopped or rep.skipped:
                typer.echo(_line(rep))

        courier = outbox.start(r, pol, metrics=metrics)
        d.run_forever(on_tick)
    finally:
        outbox.finish(courier)
        store.close()
        if server is not None:
            server.shutdown()
    exit_if_interrupted(interrupted, "dispatch")


def _store_or_stopped(r: Path, tolerance: float, server):
    """The store, awaited while it is away at start; SIGTERM (exit 0) or Ctrl-C (exit 4) during the wait stops
    `dispatch` as cleanly as at any other moment (the dispatcher's own handlers come once it exists)."""
    early: list[int] = []  # 0: SIGTERM, 1: Ctrl-C
    before = {sig: signal.signal(sig, lambda n, _f: early.append(int(n == signal.SIGINT)))
              for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return store_awaited(r, "dispatch", early, tolerance)
    except typer.Exit:
        if server is not None:
            server.shutdown()
        raise
    finally:
        for sig, h in before.items():
            signal.signal(sig, h)


def _report(rep) -> dict:
    return {
        "at": rep.at, "skipped": rep.skipped, "main": rep.main, "reaped": rep.reaped,
        "launched": [{"ticket": t, "kind": k} for t, k in rep.launched], "merged": rep.merged, "rejected": rep.rejected,
        "stopped": [{"ticket": t, "to": s} for t, s in rep.stopped],
        "cycles": [list(c) for c in rep.plan.cycles] if rep.plan else [],
        "waiting": [{"ticket": w.ticket_id, "reason": w.reason, "eligible_at": w.eligible_at} for w in rep.plan.waiting]
        if rep.plan else [],
    }


def _line(rep) -> str:
    if rep.skipped:
        return f"{iso(rep.at)} dispatch skipped: {rep.skipped}"
    parts = [f"main {rep.main}"]
    if rep.launched:
        parts.append("launched " + ", ".join(f"{t} ({k})" for t, k in rep.launched))
    if rep.reaped:
        parts.append(f"reaped {len(rep.reaped)}")
    if rep.merged:
        parts.append("merged " + ", ".join(rep.merged))
    if rep.rejected:
        parts.append("rejected " + ", ".join(rep.rejected))
    if rep.stopped:
        parts.append("stopped " + ", ".join(f"{t} -> {s}" for t, s in rep.stopped))
    if rep.plan:
        parts.append(f"pool {rep.plan.live_total + len(rep.launched)}/{rep.plan.pool_size}, waiting {len(rep.plan.waiting)}")
    return f"{iso(rep.at)} " + "; ".join(parts)


def status(root: Path = RootOpt, policy: Path = PolicyOpt, as_json: bool = JsonOpt, watch: bool = WatchOpt,
           interval: str = IntervalOpt) -> None:
    """Tickets by state, live agents, the pool, the queue, main's status and the spend (per day, per agent CLI)."""
    from healer.fleet.status import fleet_status  # lazy: pulls pydantic, networkx…: 298 ms of `healer --help`

    r = require_fleet(root)
    pol = policy_for(r, policy)

    def read():
        store = open_store(r, readonly=True)  # only reads: works on a read-only .healer/
        try:
            st = fleet_status(store, pol, system().now())
        finally:
            store.close()
        return st, lambda c: _print_status(st, c)

    if watch:
        if as_json:
            raise UsageError("status: --watch draws tables; --json prints once (use them apart)")
        every = watching.interval(interval, "status")
        watching.redraw(read, every, "healer status")
        return
    st, draw = read()
    if as_json:
        print_json(st)
        return
    draw(console)


def _print_status(st: dict, console) -> None:
    from healer import durations  # lazy: healer.durations: 2.1 ms of `healer --help`

    def ago(s: float | None) -> str:
        return "-" if s is None else durations.format(max(0, int(s)))

    main = st["main"]
    red = f" since {iso(main['red_since'])}" if main["red_since"] else ""
    # "running" would claim a dispatcher is up; the store only knows when it last passed
    last = st["dispatch"]["last_tick_at"]
    why = st["dispatch"].get("paused_reason")
    disp = (f"[red]paused[/]{f' ({why})' if why else ''}" if st["dispatch"]["paused"] else "never ran" if last is None
            else f"last pass {ago(st['now'] - last)} ago")
    low = st["dispatch"].get("disk_low")
    if low:  # the dispatcher's disk-pressure finding (docs/fleet.md "Disk pressure")
        where = ", ".join(f"{p} {n >> 20} MiB free" for p, n in (low.get("low") or {}).items())
        console.print(f"[red]disk low[/] since {iso(low['since'])}: {where} (fleet.min_free {low['min_free'] >> 20} MiB); "
                      "nothing is launched until space is back")
    console.print(f"main [bold]{main['branch']}[/]: {main['status']}{red}   dispatch: {disp}   "
                  f"pool {st['pool']['used']}/{st['pool']['size']}")
    t = Table("state", "tickets", title="Tickets")
    for s, n in st["tickets"].items():
        t.add_row(s, str(n))
    console.print(t)
    a = Table("agent", "ticket", "pid", "by", "age", "last heartbeat", title="Live agents")
    for x in st["agents"]:
        a.add_row(x["id"], x["ticket"] or "-", str(x["pid"] or "-"), x["launched_by"], ago(x["age"]), ago(x["heartbeat_age"]) + " ago")
    console.print(a)
    for x in st["ended_agents"]:  # gone, not yet recorded by the dispatcher: never shown as live
        code = "no exit status" if x["exit_code"] is None else f"exit {x['exit_code']}"
        console.print(f"ended, not yet reaped: {x['id']} ({x['ticket'] or '-'}, pid {x['pid'] or '-'}, {code})")
    q = Table("ticket", "next", "reason", "eligible", "detail", title="Queue")
    for x in st["queue"]:
        when = iso(x["eligible_at"]) if x["eligible_at"] else "-"
        q.add_row(x["ticket"], x["kind"] or "-", x["reason"], when, x["detail"] or "")
    console.print(q)
    for s in st["stops"]:
        console.print(f"{s['ticket']}: next pass moves it to {s['to']} ({s['detail']})")
    for c in st["cycles"]:
        console.print(f"[red]blocked_by cycle:[/] {' -> '.join([*c, c[0]])}")
    _print_adopted(st.get("adopted") or [], console, ago)
    _print_spend(st.get("spend") or {}, console)


def _print_adopted(rows: list, console, ago) -> None:
    """The adopted loops (docs/adopt.md), only once there are some: a fleet that adopts nothing keeps its page."""
    if not rows:
        return
    t = Table("loop", "rule", "pid", "cli", "state", "age", "worktree", title="Adopted loops")
    for x in rows:
        state = x["state"] if x["state"] == "adopted" else f"[dim]{x['state']}[/]"
        t.add_row(x["id"], x["rule"], str(x["pid"]), x["cli"], state, ago(x["age"]), x["worktree"])
    console.print(t)


def _print_spend(sp: dict, console) -> None:
    """Spend per UTC day (the last 7 that spent) and per agent CLI (healer/spend.py); `board list` has the tickets'."""
    clis = sorted(sp.get("by_cli") or {})
    total = sp.get("total_usd") or 0.0
    t = Table("day", *(f"{c}" for c in clis), "total", title=f"Spend ({usd(total) if total else '$0'} in all)")
    for x in sp.get("by_day") or []:
        t.add_row(x["day"], *(usd(x.get("by_cli", {}).get(c, 0.0)) for c in clis), usd(x["usd"]))
    if total:
        t.add_row("all days", *(usd(sp["by_cli"][c]) for c in clis), usd(total))
    else:
        t.add_row("[dim]nothing spent yet[/]", "")
    console.print(t)


def watch_cmd(
    cmd: list[str] = typer.Argument(None, metavar="-- CMD...", help="The agent command (argv, never a shell)."),
    ticket: str = typer.Option(None, "--ticket", "-t", help="The ticket this agent works on."),
    timeout: str = typer.Option(None, "--timeout", help="Deadline around the whole process tree, e.g. 20m."),
    heartbeat: str = typer.Option(None, "--heartbeat", help="Heartbeat period (default fleet.heartbeat)."),
    root: Path = RootOpt,
    policy: Path = PolicyOpt,
) -> None:
    """Run an external agent command with registration, heartbeats and a deadline; exit with its code."""
    from healer import durations  # lazy: healer.durations: 1.8 ms of `healer --help`
    from healer.fleet.watch import watch  # lazy: pulls pydantic, networkx: 257 ms of `healer --help`

    r = require_fleet(root)
    pol = policy_for(r, policy)

    def dur(name: str, v: str | None, default: float | None) -> float | None:
        if v is None:
            return default
        try:
            return durations.parse(v)
        except ValueError as e:
            raise UsageError(f"watch: --{name}: expected a duration like 90s or 20m, got {v!r}") from e

    store = open_store(r)
    try:
        beat = dur("heartbeat", heartbeat, None)
        code = watch(store, cmd or [], ticket=ticket, timeout=dur("timeout", timeout, None),
                     heartbeat=pol.fleet.heartbeat if beat is None else beat, grace=pol.loop.kill_grace)
    finally:
        store.close()
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("dispatch")(dispatch)
    app.command("status")(status)
    app.command("watch", context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True})(watch_cmd)
