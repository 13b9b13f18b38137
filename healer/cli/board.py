"""CLI: `healer board add|list|show|label|comment|move|states` (docs/spine.md "Board", README "Commands").

Everything a person does here is recorded twice: by the store with `actor="human"`, and
as a `human.action` event whose subject is the ticket. The supervisor counts the latter
as remediation attempts, so a ticket a human just touched gets its quiet period.

A write from inside a loop run (an agent, a gate, what they started) is no person's: it is refused before the
store is opened, on evidence the kernel keeps (healer/insider.py), never recorded as `actor=human` (issue 39).
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from healer import insider, lifecycle, spend
from healer.cli import watching
from healer.cli.common import JsonOpt, RootOpt, console, print_json, require_fleet, state, utf8
from healer.cli.watching import IntervalOpt, WatchOpt
from healer.clock import iso
from healer.conventions import ticket_id_problem
from healer.errors import INVALID_INPUT, HealerError, NotFound, UsageError
from healer.store import open_store
from healer.views import age, board_table, styled_state

board_app = typer.Typer(help="The ticket board of the reference fleet.", no_args_is_help=True)

HUMAN = "human"
INT64 = (-(2**63), 2**63 - 1)  # what the store keeps as an integer



def _bad(line: str) -> HealerError:
    """Bad input to a board command: exit 65, one `healer: ` line."""
    return HealerError(line, INVALID_INPUT)


def _open(root: Path | None, *, readonly: bool = False):
    from healer import log  # lazy: pulls loguru: 35 ms of `healer --help`

    if not readonly:
        why = insider.evidence()
        if why is not None:
            raise UsageError(f"board: refused: this process runs inside a loop run ({why}); the board's writes are "
                             "a person's (an agent's work reaches the board through its loop's events)")
    r = require_fleet(root)
    if root is not None:
        log.setup(r, bool(state["debug"]))
    return open_store(r, readonly=readonly)  # a read opens read-only: it works on a read-only .healer/ too


def _human(store, ticket_id: str, action: str, **details: Any) -> None:
    from loguru import logger  # lazy: pulls loguru: 32 ms of `healer --help`

    store.append("human.action", ticket_id, {"action": action, "actor": HUMAN, **details})
    logger.debug("board: {} {} by a human {}", action, ticket_id, details)


def _ticket_json(t, now: float) -> dict[str, Any]:
    d = asdict(t)
    d["labels"] = [{"label": k, "added_at": v, "age_s": round(now - v, 3)} for k, v in t.labels.items()]
    d["blocked_by"] = list(t.blocked_by)
    return d


@board_app.command("add")
def add(
    title: str = typer.Argument(..., help="What the ticket asks for."),
    id: str = typer.Option(None, "--id", help="Ticket id (default: T-N)."),
    body: str = typer.Option("", "--body", help="Longer description."),
    priority: int = typer.Option(2, "--priority", "-P", help="Lower is served first."),
    blocked_by: list[str] = typer.Option([], "--blocked-by", "-b", help="A ticket that must be done first (repeatable)."),
    label: list[str] = typer.Option([], "--label", "-l", help="A label (repeatable)."),
    root: Path = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Add a queued ticket."""
    utf8(title, "board add: title")
    utf8(body, "board add: --body")
    if not title.strip():
        raise _bad("board add: title: expected some text, got an empty title")
    if not INT64[0] <= priority <= INT64[1]:
        raise UsageError(f"board add: --priority: expected a whole number from {INT64[0]} to {INT64[1]}, got {priority}")
    if id is not None and (why := ticket_id_problem(id)):
        raise _bad(f"board add: --id: {why}, got {id!r}")
    for lb in label:
        _check_label(lb)
    store = _open(root)
    try:
        known = {t.id for t in store.tickets()}
        missing = [b for b in blocked_by if b not in known]
        if missing:
            # dependencies must exist first, which also keeps the dependency graph acyclic
            raise _bad(f"board add: --blocked-by: expected existing ticket ids, got unknown {', '.join(missing)}")
        t = store.add_ticket(title, id=id, body=body, priority=priority, blocked_by=list(dict.fromkeys(blocked_by)),
                             labels=label, actor=HUMAN)
        _human(store, t.id, "add", title=title)
        if as_json:
            print_json(_ticket_json(t, store.now()))
        else:
            typer.echo(f"{t.id} queued: {t.title}")
    finally:
        store.close()


@board_app.callback(invoke_without_command=True)
def board_main(ctx: typer.Context, watch: bool = WatchOpt, interval: str = IntervalOpt, root: Path = RootOpt) -> None:
    """`healer board --watch`: the board (`board list`) redrawn when it changes."""
    if ctx.invoked_subcommand is not None:
        if watch:
            raise UsageError(f"board: --watch goes after the command: healer board {ctx.invoked_subcommand} --watch")
        return
    if not watch:
        raise UsageError("board: expected a command (add, list, show, label, comment, move, states) or --watch")
    every = watching.interval(interval, "board")
    watching.redraw(lambda: _list_view(root, []), every, "healer board")


def _list_view(root: Path | None, state: list[str]):
    """(data, draw) of `board list`: the tickets with their spend (healer/spend.py), as JSON data and as a table."""
    store = _open(root, readonly=True)
    try:
        tickets = store.tickets(state or None)
        now = store.now()
        led = spend.ledger_of(store)
    finally:
        store.close()
    data = [{**_ticket_json(t, now), "spend_usd": round(led.by_ticket.get(t.id, 0.0), 6)} for t in tickets]
    # the spend column once a ticket spent something: a fleet without agent costs keeps the table it had
    return data, lambda c: c.print(board_table(tickets, now, spend=led.by_ticket or None))


@board_app.command("list")
def list_(
    state: list[str] = typer.Option([], "--state", "-s", help="Only tickets in this state (repeatable)."),
    root: Path = RootOpt,
    as_json: bool = JsonOpt,
    watch: bool = WatchOpt,
    interval: str = IntervalOpt,
) -> None:
    """Tickets in serving order (priority, then age), with what each spent."""
    bad = [s for s in state if s not in lifecycle.STATES]
    if bad:
        raise UsageError(f"board list: --state: expected one of {', '.join(lifecycle.STATES)}, got {', '.join(bad)}")
    if watch:
        if as_json:
            raise UsageError("board list: --watch draws a table; --json prints once (use them apart)")
        every = watching.interval(interval, "board list")
        watching.redraw(lambda: _list_view(root, state), every, "healer board")
        return
    data, draw = _list_view(root, state)
    if as_json:
        print_json(data)
        return
    draw(console)


@board_app.command("show")
def show(
    ticket_id: str = typer.Argument(..., metavar="ID"),
    events: int = typer.Option(20, "--events", "-n", help="How many recent events to show."),
    root: Path = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """One ticket: labels with age, comments, attempts, proposals, agents, recent events."""
    store = _open(root, readonly=True)
    try:
        t = store.ticket(ticket_id)
        now = store.now()
        comments = store.comments(ticket_id)
        attempts = store.attempts(ticket_id)
        proposals = store.proposals(ticket_id)
        agents = store.agents(ticket_id=ticket_id)
        evs = store.events(subject=ticket_id)[-events:] if events > 0 else []
        led = spend.ticket_ledger(store, ticket_id, [a.run_id for a in attempts])
        blockers = {}
        for b in t.blocked_by:
            try:
                blockers[b] = store.ticket(b).state
            except NotFound:
                blockers[b] = "missing"
    finally:
        store.close()
    if as_json:
        print_json({
            "ticket": _ticket_json(t, now),
            "blockers": blockers,
            "comments": [asdict(c) for c in comments],
            "attempts": [asdict(a) for a in attempts],
            "proposals": [asdict(p) for p in proposals],
            "agents": [asdict(a) for a in agents],
            "events": [asdict(e) for e in evs],
            "spend": _spend_json(led, ticket_id),
        })
        return

    console.print(f"[bold]{escape(t.id)}[/]  {styled_state(t.state)}  priority {t.priority}  {escape(t.title)}", highlight=False)
    if t.body:
        console.print(t.body, markup=False, highlight=False)
    console.print(f"created {iso(t.created_at)}, updated {age(now - t.updated_at)} ago", highlight=False)
    sp = _spend_json(led, ticket_id)
    console.print(f"spend {spend.usd(sp['usd']) if sp['usd'] else '$0'} over {sp['iterations']} iteration(s)"
                  + (f" ({', '.join(sp['clis'])})" if sp["clis"] else ""), highlight=False)
    if blockers:
        console.print("blocked by: " + escape(", ".join(f"{b} ({s})" for b, s in blockers.items())), highlight=False)
    if t.labels:
        lt = Table("label", "age", title="labels", title_justify="left")
        for k, v in t.labels.items():
            lt.add_row(escape(k), age(now - v))
        console.print(lt)
    if comments:
        ct = Table("at", "author", "comment", title="comments", title_justify="left")
        for c in comments:
            ct.add_row(iso(c.at), escape(c.author), escape(c.body))
        console.print(ct)
    if attempts:
        at = Table("#", "kind", "at", "exit", "failure signature", "state hash", title="attempts", title_justify="left")
        for a in attempts:
            at.add_row(str(a.id), escape(a.kind), iso(a.at), "" if a.exit_code is None else str(a.exit_code),
                       escape(a.failure_signature or ""), escape((a.state_hash or "")[:12]))
        console.print(at)
    if proposals:
        pt = Table("#", "branch", "commit", "state", "created", title="proposals", title_justify="left")
        for p in proposals:
            pt.add_row(str(p.id), escape(p.branch), escape(p.commit[:12]), escape(p.state), iso(p.created_at))
        console.print(pt)
    if agents:
        gt = Table("agent", "state", "pid", "heartbeat", title="agents", title_justify="left")
        for a in agents:
            gt.add_row(escape(a.id), escape(a.state), "" if a.pid is None else str(a.pid), age(now - a.heartbeat_at) + " ago")
        console.print(gt)
    if evs:
        et = Table("#", "when", "kind", "payload", title="recent events", title_justify="left")
        for e in evs:
            et.add_row(str(e.id), age(now - e.at) + " ago", escape(e.kind), escape(_payload_text(e.payload)))
        console.print(et)


def _spend_json(led: spend.Ledger, ticket_id: str) -> dict[str, Any]:
    return {"usd": round(led.by_ticket.get(ticket_id, 0.0), 6), "iterations": led.iterations.get(ticket_id, 0),
            "clis": sorted(led.clis.get(ticket_id, ())),
            "by_day": [{"day": d, "usd": round(v, 6)} for d, v in sorted(led.by_day.items())]}


def _payload_text(p: dict) -> str:
    s = ", ".join(f"{k}={v}" for k, v in p.items())
    return s if len(s) <= 100 else s[:97] + "..."


def _check_label(label: str) -> None:
    utf8(label, "board: label")
    if not label or any(c.isspace() for c in label) or len(label) > 64:
        raise _bad(f"board: label: expected a word without spaces (at most 64 characters), got {label!r}")


@board_app.command("label")
def label(
    ticket_id: str = typer.Argument(..., metavar="ID"),
    name: str = typer.Argument(..., metavar="LABEL"),
    remove: bool = typer.Option(False, "--remove", "-r", help="Take the label off."),
    root: Path = RootOpt,
) -> None:
    """Put a label on a ticket (or take it off with --remove)."""
    _check_label(name)
    store = _open(root)
    try:
        if remove:
            changed = store.unlabel(ticket_id, name, actor=HUMAN)
        else:
            changed = store.label(ticket_id, name, actor=HUMAN)
        if changed:
            _human(store, ticket_id, "unlabel" if remove else "label", label=name)
    finally:
        store.close()
    verb = "removed from" if remove else "added to"
    typer.echo(f"{name} {verb} {ticket_id}" if changed else f"{ticket_id}: nothing to do ({name} {'absent' if remove else 'present'})")


@board_app.command("comment")
def comment(
    ticket_id: str = typer.Argument(..., metavar="ID"),
    text: str = typer.Argument(..., metavar="TEXT", help="The comment; '-' reads it from stdin."),
    root: Path = RootOpt,
) -> None:
    """Comment on a ticket."""
    if text == "-":
        try:
            text = sys.stdin.read()
        except UnicodeDecodeError as e:
            raise _bad(f"board comment: stdin: expected UTF-8 text, got a byte that is not UTF-8 at offset {e.start}") from None
    utf8(text, "board comment: TEXT")
    if not text.strip():
        raise _bad("board comment: TEXT: expected some text, got an empty comment")
    store = _open(root)
    try:
        c = store.comment(ticket_id, text, author=HUMAN)
        _human(store, ticket_id, "comment", comment_id=c.id)
    finally:
        store.close()
    typer.echo(f"comment {c.id} on {ticket_id}")


@board_app.command("move")
def move(
    ticket_id: str = typer.Argument(..., metavar="ID"),
    state: str = typer.Argument(..., metavar="STATE", help=f"One of: {', '.join(lifecycle.STATES)}."),
    reason: str = typer.Option("", "--reason", help="Why (kept in the event log)."),
    root: Path = RootOpt,
) -> None:
    """Move a ticket along the lifecycle (`healer board states` draws the allowed moves)."""
    store = _open(root)
    try:
        before = store.ticket(ticket_id).state
        t = store.move_ticket(ticket_id, state, actor=HUMAN, reason=reason)
        if t.state != before:
            _human(store, ticket_id, "move", **{"from": before, "to": t.state, "reason": reason})
    finally:
        store.close()
    typer.echo(f"{ticket_id}: {before} -> {t.state}" if t.state != before else f"{ticket_id}: already {t.state}")


@board_app.command("states")
def states(mermaid: bool = typer.Option(False, "--mermaid", help="A Mermaid state diagram instead of the table."),
           as_json: bool = JsonOpt) -> None:
    """Print the ticket lifecycle: every allowed move (from, to, event), or a Mermaid diagram."""
    rows = lifecycle.table()
    if mermaid:
        typer.echo(lifecycle.mermaid())
    elif as_json:
        print_json([{"from": f, "to": t, "event": ev} for f, t, ev in rows])
    else:
        w = max(len(f) for f, _, _ in rows)
        w2 = max(len(t) for _, t, _ in rows)
        typer.echo(f"{'from':<{w}}  {'to':<{w2}}  event")
        for f, t, ev in rows:
            typer.echo(f"{f:<{w}}  {t:<{w2}}  {ev}")


def register(app: typer.Typer) -> None:
    app.add_typer(board_app, name="board")
