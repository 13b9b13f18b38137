"""CLI: supervise, plan, up, journal, quarantine list|restore (docs/supervisor.md, README "Commands")."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import typer

from healer.cli.common import (
    JsonOpt,
    PolicyOpt,
    RootOpt,
    end_leftovers,
    exit_if_interrupted,
    on_ctrl_c,
    policy_for,
    print_json,
    require_fleet,
    store_awaited,
    store_for,
)
from healer.cli.watching import Narrator
from healer.clock import iso, system
from healer.errors import INTERNAL, INVALID_INPUT, STOPPED, HealerError
from healer.errors import HealerError as _Err
from healer.narrate import TICKS, is_tick
from healer.store import open_store
from healer.store.corrupt import StoreCorrupt, raise_if_corrupt


def _setup_logs(root: Path, name: str) -> None:
    """Human lines on stderr (loguru's default), JSON lines in .healer/logs/<name>.jsonl."""
    from loguru import logger  # lazy: pulls loguru: 32 ms of `healer --help`

    logs = root / ".healer" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    from healer.log import SafeFile  # lazy: pulls loguru: 33 ms of `healer --help`

    logger.add(SafeFile(logs / f"{name}.jsonl", 50 * 1024 * 1024).write, serialize=True, level="INFO", catch=True)


def _age(now: float, t: float | None) -> str:
    from healer import durations  # lazy: healer.durations: 1.9 ms of `healer --help`

    if t is None:
        return "-"
    return durations.format(max(0, round(now - t)))


def _compact(d: Any, limit: int = 400) -> str:
    s = json.dumps(d, sort_keys=True, default=str, separators=(", ", ": "))
    return s if len(s) <= limit else s[: limit - 1] + "…"


_EPOCHS = (946_684_800, 4_102_444_800)  # 2000-01-01 .. 2100-01-01: a number in there under a time key is a moment


def human_times(d: Any, key: str = "") -> Any:
    """Evidence for people: moments (`*_at`, `since`, `last_activity`, label → added-at maps) as ISO times."""
    timey = key.endswith("_at") or key in ("since", "last_activity", "labels", "at", "time", "started", "ended")
    if isinstance(d, dict):
        return {k: human_times(v, k if not timey else key) for k, v in d.items()}
    if isinstance(d, list | tuple):
        return [human_times(v, key) for v in d]
    if timey and isinstance(d, int | float) and not isinstance(d, bool) and _EPOCHS[0] <= d <= _EPOCHS[1]:
        return iso(d)
    return d


def plan_data(rep) -> dict[str, Any]:
    s, d = rep.snapshot, rep.decision

    def act(a) -> dict[str, Any]:
        return {"action": a.action, "subject": a.subject, "params": a.params, "reason": a.reason, "rule": a.rule}

    return {
        "now": s.now, "at": iso(s.now), "halted": s.halted, "failed_sources": sorted(s.failed_sources),
        "findings": [{"key": f.key, "kind": f.kind, "subject": f.subject, "since": f.since, "severity": f.severity,
                      "status": f.status, "evidence": f.evidence,
                      "planned": [act(a) for a in d.actions if a.reason == f.key],
                      "deferred": [{**act(a), "why": why} for a, why in d.deferred if a.reason == f.key]}
                     for f in d.findings],
        "actions": [act(a) for a in d.actions],
        "deferred": [{**act(a), "why": why} for a, why in d.deferred],
        "alerts": [{"key": al.key, "text": al.text, "severity": al.severity} for al in d.alerts],
        "repair": d.repair, "repair_reason": getattr(d, "repair_reason", ""),
        # what no rule moves: tickets waiting for a person (a finding-free fleet can still need one)
        "needs_human": sorted(t.id for t in s.tickets if t.state == "needs_human"),
    }


def print_plan(rep) -> None:
    data = plan_data(rep)
    now = data["now"]
    out = [f"plan at {data['at']}" + ("  (HALTED: observe-only)" if data["halted"] else "")]
    if data["failed_sources"]:
        out.append(f"failed sources (fail-open, dependent sentinels unknown): {', '.join(data['failed_sources'])}")
    out.append(f"\nfindings ({len(data['findings'])})")
    if not data["findings"]:
        out.append("  none: the fleet looks healthy" if not data["needs_human"] else "  none")
    for f in data["findings"]:
        out.append(f"  {f['kind']:<20} {f['subject']}  {f['severity']}"
                   + ("  [unknown]" if f["status"] == "unknown" else f"  for {_age(now, f['since'])}"))
        out.append(f"      evidence: {_compact(human_times(f['evidence']))}")
        for a in f["planned"]:
            out.append(f"      plan:     {a['action']} {a['subject']}" + (f"  {_compact(a['params'], 160)}" if a["params"] else ""))
        for a in f["deferred"]:
            out.append(f"      deferred: {a['action']} {a['subject']}: {a['why']}")
    keys = {f["key"] for f in data["findings"]}
    other = [a for a in data["actions"] if a["reason"] not in keys]
    if other:
        out.append("\nother planned actions")
        out += [f"  {a['action']} {a['subject']}  ({a['reason']})" for a in other]
    other_d = [a for a in data["deferred"] if a["reason"] not in keys]
    if other_d:
        out.append("\nother deferred actions")
        out += [f"  {a['action']} {a['subject']}: {a['why']}" for a in other_d]
    out.append(f"\nplanned {len(data['actions'])} action(s), deferred {len(data['deferred'])}, alerts {len(data['alerts'])}, "
               f"{len(data['needs_human'])} ticket(s) need a human")
    if data["needs_human"]:
        shown = data["needs_human"][:20]
        out.append("  needs a human: " + ", ".join(shown) + (f" (+{len(data['needs_human']) - 20} more)"
                                                           if len(data["needs_human"]) > 20 else ""))
    for al in data["alerts"]:
        out.append(f"  alert [{al['severity']}] {al['key']}: {al['text']}")
    if data["repair"]:
        out.append(f"repair agent: would launch ({data['repair_reason']})")
    typer.echo("\n".join(out))


def _supervisor(root: Path, policy_path: Path | None, *, dry_run: bool = False, metrics=None, repair_async: bool = False,
                early: list[int] | None = None):
    """`early`: the signals (0 SIGTERM, 1 Ctrl-C) seen so far; one while the store is awaited ends the wait."""
    from healer.supervisor import Supervisor  # lazy: pulls pydantic, networkx…: 351 ms of `healer --help`

    pol = policy_for(root, policy_path)
    if not dry_run:
        end_leftovers(root, pol)  # what killed runs left (frozen groups included) is ended first
    if dry_run:
        store = store_for(root, readonly=True)  # a dry run writes nothing: it works on a read-only .healer/
    else:  # a store away at start is ridden out for up to store.outage_tolerance, as one lost later
        store = store_awaited(require_fleet(root), "supervise", early if early is not None else [],
                              pol.store.outage_tolerance)
    return Supervisor(root, pol, store, system(), dry_run=dry_run, metrics=metrics, repair_async=repair_async)


def supervise(
    once: bool = typer.Option(False, "--once", help="Run one tick and exit."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print findings and the plan; change nothing (no lease, no action)."),
    metrics_port: int = typer.Option(None, "--metrics-port", min=1, max=65535,
                                     help="Serve Prometheus metrics on 127.0.0.1:PORT/metrics."),
    as_json: bool = JsonOpt,
    root: Path = RootOpt,
    policy: Path = PolicyOpt,
) -> None:
    """Run the supervisor: lease, recover intents, snapshot, core, execute, notify, every supervisor.tick."""
    r = require_fleet(root)
    early: list[int] = []  # 0: SIGTERM, 1: Ctrl-C
    interrupted: list[int] = []
    if not once:  # a SIGTERM from the moment the metrics port answers stops cleanly (exit 0, lease released)
        signal.signal(signal.SIGTERM, lambda *a: early.append(0))
        signal.signal(signal.SIGINT, lambda *a: early.append(1))
    from healer.metrics import start as start_metrics  # lazy: pulls pydantic, prometheus_client: 138 ms of `healer --help`

    metrics, server = start_metrics(metrics_port, "supervise")
    if not dry_run:
        _setup_logs(r, "supervisor")
    sup = _supervisor(r, policy, dry_run=dry_run, metrics=metrics, repair_async=not once, early=early)
    from healer.notify import outbox  # lazy: pulls pydantic, networkx…: 305 ms of `healer --help`
    from healer.notify.outbox import ONCE_DEADLINE  # lazy: with outbox above (0.2 ms more)

    courier = None
    try:
        if once:
            try:
                rep = sup.tick()
            finally:
                if not dry_run:
                    sup.store.release_lease("supervisor", sup.holder)  # a one-shot run leaves no lock behind
            if not dry_run:  # after the tick, never inside it: one try per owed notification, bounded by its timeout
                c = outbox.Courier(sup.store, sup.policy, metrics=metrics)
                c.drain_once(ONCE_DEADLINE)
                c.stop()
            if dry_run:
                print_json(plan_data(rep)) if as_json else print_plan(rep)
            elif as_json:
                print_json(rep.summary())
            else:
                _print_tick(rep)
            return
        signal.signal(signal.SIGTERM, sup.stop)
        interrupted = on_ctrl_c(sup.stop)  # Ctrl-C: exit 4, as `healer up`
        interrupted += [n for n in early if n]
        if early:
            sup.stop()
        if not dry_run:
            courier = outbox.start(r, sup.policy, sup.clock, metrics=metrics)

        def on_tick(rep) -> None:
            if dry_run:
                print_json(plan_data(rep)) if as_json else print_plan(rep)
            elif as_json:
                typer.echo(json.dumps(rep.summary(), default=str))
            else:
                _print_tick(rep)
            sys.stdout.flush()

        sup.run_forever(on_tick)
    finally:
        outbox.finish(courier)
        if server is not None:
            server.shutdown()
        sup.store.close()
    exit_if_interrupted(interrupted, "supervise")


def _print_tick(rep) -> None:
    s = rep.summary()
    if rep.skipped:
        typer.echo(f"{iso(rep.at)} tick skipped: {rep.skipped}")
        return
    outs = ", ".join(f"{k} {v}" for k, v in sorted(s["outcomes"].items())) or "none"
    line = (f"{iso(rep.at)} tick: {s['findings']} finding(s), {s['planned']} planned, {s['deferred']} deferred, "
            f"actions: {outs}, alerts sent {s['alerts_sent']}, {s['duration_ms']} ms")
    if s["recovered"]:
        line += f", recovered {s['recovered']} intent(s)"
    if s["failed_sources"]:
        line += f", failed sources: {', '.join(s['failed_sources'])}"
    typer.echo(line)
    for a, o in rep.outcomes:
        typer.echo(f"  {o.status:<8} {a.action} {a.subject}: {o.reason}")


def plan(as_json: bool = JsonOpt, root: Path = RootOpt, policy: Path = PolicyOpt) -> None:
    """Print what the supervisor sees (findings with evidence) and would do (plan, deferred); change nothing."""
    r = require_fleet(root)
    sup = _supervisor(r, policy, dry_run=True)
    try:
        rep = sup.plan()
    finally:
        sup.store.close()
    print_json(plan_data(rep)) if as_json else print_plan(rep)


def up(root: Path = RootOpt, policy: Path = PolicyOpt,
       metrics_port: int = typer.Option(None, "--metrics-port", min=1, max=65535,
                                        help="Serve Prometheus metrics on 127.0.0.1:PORT/metrics."),
       console_port: int = typer.Option(None, "--console-port", min=0, max=65535,
                                        help="Serve the operator console on 127.0.0.1:PORT (0: a free port; docs/console.md)."),
       quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the start and stop lines, not one line "
                                  "per transition, action and page.")) -> None:
    """Run the dispatcher and the supervisor together until SIGTERM/SIGINT; print what they do (one line per ticket
    transition, remediation action, page and escalation; never a tick)."""
    from loguru import logger  # lazy: pulls loguru: 33 ms of `healer --help`

    from healer.fleet.dispatcher import Dispatcher, preflight  # lazy: pulls pydantic, networkx…: 292 ms of `healer --help`
    from healer.supervisor import Supervisor  # lazy: pulls pydantic, networkx…: 354 ms of `healer --help`

    stop = threading.Event()
    early: list[int] = []
    # SIGTERM from the first instruction: a stop during set-up ends `up` cleanly too (Ctrl-C: exit 4)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    def early_interrupt(*_: Any) -> None:
        early.append(1)
        stop.set()

    signal.signal(signal.SIGINT, early_interrupt)
    r = require_fleet(root)
    from healer.metrics import SpendFeed  # lazy: pulls pydantic, prometheus_client: 140 ms of `healer --help`
    from healer.metrics import start as start_metrics  # lazy: with SpendFeed above (0.1 ms more)

    metrics, server = start_metrics(metrics_port, "up")
    _setup_logs(r, "up")
    pol = policy_for(r, policy)
    clock = system()
    from healer.store import open_store_waiting, outage  # lazy: pulls prometheus_client: 34 ms of `healer --help`

    # a store away at start (the server restarting, down for maintenance) is ridden out as one lost later
    outage.set_tolerance(pol.store.outage_tolerance)

    try:
        d_store = open_store_waiting(r, clock, wait=stop.wait, who="up")
        s_store = open_store_waiting(r, clock, wait=stop.wait, who="up") if d_store is not None else None
    except _Err as e:  # away past store.outage_tolerance (69), damaged (74), refused: the one line of a daemon's end
        raise _Err(f"up: {e}", e.exit_code) from None
    if s_store is None:  # stopped while it waited
        if d_store is not None:
            d_store.close()
        typer.echo("healer up: stopped before the store came back" + (" (interrupted)" if early else ""))
        if early:
            raise typer.Exit(STOPPED)
        return
    end_leftovers(r, pol)  # before anything starts: what killed runs left (frozen groups included) is ended first
    disp = Dispatcher(r, pol, d_store, clock, policy_path=policy)
    preflight(pol)
    sup = Supervisor(r, pol, s_store, clock, repair_async=True, metrics=metrics)
    from healer.notify import outbox  # lazy: pulls pydantic, networkx…: 287 ms of `healer --help`

    courier = outbox.start(r, pol, clock, metrics=metrics)  # alerts owed by an earlier run are delivered too
    console = None
    if console_port is not None:  # the console in this process, on the same store (its own connection)
        from healer.console.serve import beside_up  # lazy: the web stack: 200 ms, only with --console-port

        console = beside_up(r, pol, clock, console_port, runtime=sup.runtime)
        typer.echo(f"healer up: console at {console.url}")
    errors: dict[str, str] = {}
    codes: dict[str, int] = {}  # a store gone past its tolerance is 69, a damaged one 74, a lost one 70
    interrupted: list[int] = list(early)
    first_pass = threading.Event()  # reap before you judge: the supervisor starts once the dispatcher has reaped

    def interrupt(*_: Any) -> None:  # Ctrl-C: a stop the table calls 4; SIGTERM (a service manager) is 0
        interrupted.append(1)
        halt()

    def halt(*_: Any) -> None:
        stop.set()
        first_pass.set()
        disp.stop()
        sup.stop()

    def runner(name: str, fn) -> None:
        try:
            fn()
        except HealerError as e:  # a lost store: one line, the other half is stopped with it
            errors[name], codes[name] = str(e), e.exit_code
        except BaseException as e:  # noqa: BLE001 - reported in one line, and the other half is stopped with it
            try:
                raise_if_corrupt(d_store, e)
            except StoreCorrupt as c:  # damaged pages met outside a pass: the same one line and exit 74
                errors[name], codes[name] = str(c), c.exit_code
                return
            errors[name] = f"{type(e).__name__}: {e}"
            logger.opt(exception=e).debug("{} stopped", name)
        finally:
            halt()

    def supervise_after_first_pass() -> None:
        first_pass.wait(timeout=max(60.0, 3 * pol.fleet.dispatch_tick))  # a failing first pass must not hold it forever
        if not stop.is_set():
            sup.run_forever()

    # the third reader: what the two do, said from the event log by cursor (and the spend metrics fed from it)
    voice = _narrator(r, clock, metrics, SpendFeed() if metrics is not None else None, quiet)
    signal.signal(signal.SIGTERM, halt)
    signal.signal(signal.SIGINT, interrupt)

    def on_pass(rep: Any) -> None:
        first_pass.set()
        if metrics:
            metrics.dispatched(rep)

    threads = [] if stop.is_set() else [threading.Thread(target=runner, args=("dispatcher", lambda: disp.run_forever(on_pass)),
                                name="dispatcher"),
               threading.Thread(target=runner, args=("supervisor", supervise_after_first_pass), name="supervisor")]
    for t in threads:
        t.start()
    typer.echo(f"healer up at {r}: dispatcher and supervisor running (SIGTERM or Ctrl-C to stop)")
    beat = 0
    while not stop.is_set():
        stop.wait(0.2)
        voice.step()
        beat += 1
        if beat % 5 == 0 and not stop.is_set():
            try:
                d_store.check()
            except HealerError as e:
                errors["store"], codes["store"] = str(e), e.exit_code
                halt()
    for t in threads:
        t.join(timeout=30)
    voice.step()  # the last transitions, before the stop line
    voice.close()
    if console is not None:
        console.stop()
    try:
        outbox.finish(courier)
    except Exception:  # noqa: BLE001 - a courier on a lost store must not add a traceback to the one line
        pass
    if server is not None:
        server.shutdown()
    for st in (d_store, s_store):
        try:
            st.close()
        except Exception:  # noqa: BLE001 - closing a lost store must not add a traceback to its one line
            pass
    if errors:
        name = "store" if "store" in errors else sorted(errors)[0]
        raise HealerError(f"up: {errors[name]}", codes.get(name, INTERNAL))
    typer.echo("healer up: stopped" + (" (interrupted)" if interrupted else ""))
    if interrupted:
        raise typer.Exit(STOPPED)


class _Voice:
    """`up`'s narrator on its own connection; a read that fails (the store away: the main loop's check judges that)
    skips a beat instead of ending `up`."""

    def __init__(self, store, narrator) -> None:
        self.store, self.narrator = store, narrator

    def step(self) -> None:
        if self.narrator is None:
            return
        try:
            self.narrator.step()
        except Exception as e:  # noqa: BLE001 - a narrator never ends the daemons; the store check does
            from loguru import logger  # lazy: loaded by `up` already (0.1 ms)

            logger.debug("up: narrator skipped a beat: {}", e)

    def close(self) -> None:
        if self.store is not None:
            try:
                self.store.close()
            except Exception:  # noqa: BLE001 - closing a lost store must not add a traceback to its one line
                pass


def _narrator(root: Path, clock, metrics, feed, quiet: bool) -> _Voice:
    if quiet and metrics is None:
        return _Voice(None, None)
    store = None
    try:
        store = open_store(root, clock)
        return _Voice(store, Narrator(store, metrics, feed, echo=(lambda _line: None) if quiet else typer.echo))
    except Exception as e:  # noqa: BLE001 - the daemons run without a voice rather than not at all
        typer.echo(f"healer up: not narrating: {e}", err=True)
        _Voice(store, None).close()
        return _Voice(None, None)


def journal(
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new events as they come."),
    kind: str = typer.Option(None, "--kind", "-k", help="Only events whose kind starts with PREFIX (e.g. remedy., intent.)."),
    subject: str = typer.Option(None, "--subject", "-s", help="Only events about this subject (ticket id, path...)."),
    limit: int = typer.Option(50, "--limit", "-n", help="How many past events to print first (0: none, -1: all)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per event and per line (JSON Lines)."),
    ticks: bool = typer.Option(False, "--ticks", help="Show the daemons' ticks too (supervisor.tick, dispatch.tick, "
                               "supervisor.skipped); hidden unless --kind names them."),
    root: Path = RootOpt,
) -> None:
    """Print the event log (append-only): transitions, intents, actions, alerts; ticks with --ticks."""
    hide = not ticks and not (kind and any(t.startswith(kind) or kind.startswith(t) for t in TICKS))
    termed: list[int] = []
    if follow:  # from the first line: a signal while the past is printed or the store opens ends it cleanly too
        def _stop(signum: int, _frame: Any) -> None:
            # a follower only reads: it ends on the spot (SIGTERM 0, Ctrl-C 4) instead of raising into
            # whatever it was doing (an exception raised inside a library's lock could leave it hanging)
            try:
                sys.stdout.flush()
            except Exception:  # noqa: BLE001 - interrupted mid-write: the partial line is not worth a hang
                pass
            if signum == signal.SIGINT:
                os.write(2, b"healer: interrupted\n")
            os._exit(0 if signum == signal.SIGTERM else STOPPED)

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    store = None
    try:
        # opened inside the try: a SIGTERM while the store opens ends a follow as cleanly as one later
        store = store_for(root, readonly=not follow)  # a follower must see new writes: a plain connection
        last = store.last_event_id()
        if limit == 0:
            past = []
        elif limit > 0 and not kind and not subject:
            past = _tail(store, limit, last, hide)  # a long log: read only its end
        else:
            past = [e for e in store.events(prefix=kind, subject=subject, until_id=last) if not (hide and is_tick(e.kind))]
            past = past[-limit:] if limit > 0 else past
        for e in past:
            _print_event(e, as_json)
        if not follow:
            return
        sys.stdout.flush()
        for e in store.follow(after=last, poll=0.5):
            if (kind and not e.kind.startswith(kind)) or (subject and e.subject != subject) or (hide and is_tick(e.kind)):
                continue
            _print_event(e, as_json)
            sys.stdout.flush()
    except KeyboardInterrupt:
        if not follow:
            raise
        if termed:
            return

        raise typer.Exit(STOPPED) from None
    finally:
        if store is not None:
            store.close()


def _tail(store, n: int, last: int, hide: bool) -> list:
    """The last `n` events up to `last`, ticks left out when `hide`: read backwards in growing pages, so a log that is
    mostly ticks still gives `n` events and a short one is read once."""
    if not hide:
        return [e for e in store.tail(n) if e.id <= last]
    got: list = []
    hi, page = last, max(2 * n, 100)
    while hi > 0 and len(got) < n:
        lo = max(0, hi - page)
        got = [e for e in store.events(after=lo, until_id=hi) if not is_tick(e.kind)] + got
        hi, page = lo, page * 2
    return got[-n:]


def _print_event(e, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps({"id": e.id, "at": e.at, "kind": e.kind, "subject": e.subject, "payload": e.payload},
                              sort_keys=True, default=str))
    else:
        typer.echo(f"{e.id:>6} {iso(e.at)} {e.kind:<22} {e.subject:<14} {_compact(e.payload, 300)}")


quarantine_app = typer.Typer(help="Files the healer moved aside (restorable byte for byte).", no_args_is_help=True)


@quarantine_app.command("list")
def quarantine_list(
    all_: bool = typer.Option(False, "--all", help="Include restored entries."),
    as_json: bool = JsonOpt,
    root: Path = RootOpt,
) -> None:
    """List quarantined files: id, original path, size, sha256, reason, time."""
    from healer import quarantine as q  # lazy: healer.quarantine: 12 ms of `healer --help`

    r = require_fleet(root)
    bad: list[str] = []
    ents = [e for e in q.entries(r, bad=bad) if all_ or e.state == "quarantined"]
    for line in bad:
        typer.echo(f"healer: {line}", err=True)
    if as_json:
        print_json([e.as_dict() for e in ents])
        return
    if not ents:
        typer.echo("quarantine is empty")
        return
    for e in ents:
        typer.echo(f"{e.id}\n    {e.state}  {e.size} bytes  sha256 {e.sha256[:16]}  {iso(e.time)}  {e.reason}")


@quarantine_app.command("restore")
def quarantine_restore(
    target: str = typer.Argument(..., help="A batch id, an entry id (batch/path) or an original path."),
    as_json: bool = JsonOpt,
    root: Path = RootOpt,
) -> None:
    """Put quarantined files back where they were (refuses to overwrite an existing file)."""
    from healer import quarantine as q  # lazy: healer.quarantine: 12 ms of `healer --help`

    r = require_fleet(root)
    try:
        done = q.restore(r, target, system())
    except HealerError as e:
        if e.exit_code != INTERNAL:
            raise
        # a copy missing or altered, a manifest that does not parse: the quarantine's data is bad (65), not healer
        raise HealerError(str(e), INVALID_INPUT) from None
    store = open_store(r)
    try:
        for entry in done:
            store.append("quarantine.restored", entry.path, {"id": entry.id, "sha256": entry.sha256, "size": entry.size,
                                                               "actor": "human"})
    finally:
        store.close()
    if as_json:
        print_json([entry.as_dict() for entry in done])
        return
    for entry in done:
        typer.echo(f"restored {entry.path} ({entry.size} bytes, sha256 {entry.sha256[:16]})")


def register(app: typer.Typer) -> None:
    app.command("supervise")(supervise)
    app.command("plan")(plan)
    app.command("up")(up)
    app.command("journal")(journal)
    app.add_typer(quarantine_app, name="quarantine")
