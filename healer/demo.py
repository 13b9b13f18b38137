"""`healer demo` (and `make run`): a short tour of what healer has, on a throwaway fleet.

`run(console)` is the whole demo: it builds a temporary fleet, puts tickets with
priorities, dependencies and labels on its board, validates the shipped policies
(and shows what a bad one looks like), and prints the board. Later stages (a live
healed fleet, the game-day summary) extend this function.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.rule import Rule

from chaos import engine, runner
from chaos.scenario import discover, load
from healer import lifecycle
from healer.errors import InvalidInput
from healer.init import init_fleet
from healer.policy import load_policy
from healer.policy.cache import cache_dir
from healer.store import open_store
from healer.views import board_table

REPO = Path(__file__).resolve().parents[1]

TICKETS = [
    # id, title, priority, blocked_by, labels
    ("T-1", "Make the build green again", 1, [], ["ci"]),
    ("T-2", "Add retries to the HTTP client", 2, [], []),
    ("T-3", "Document the retry settings", 3, ["T-2"], ["docs"]),
    ("T-4", "Release 0.2", 2, ["T-1", "T-3"], ["release"]),
    ("T-5", "Triage the flaky test report", 2, [], ["to-review"]),
]

BAD_POLICY = """\
loop:
  max_iterations: 40        # above absolute_max
retry:
  max_launches: 0
  backoff: [5m, soon]
"""


def run(console: Console, *, keep: bool = False, suite: bool = True, report: Path | None = None) -> int:
    """The demo; returns the exit code (0 when everything shown worked)."""
    rc = 0
    tmp = Path(tempfile.mkdtemp(prefix="healer-demo-"))
    try:
        console.print(Rule("[bold]healer demo[/]: a fleet, its policy, broken on purpose and healed"))

        console.print("\n[bold]1. A fleet[/]  (healer init)")
        res = init_fleet(tmp, actor="demo")
        console.print(f"   {tmp}: created {', '.join(res.created)}", highlight=False)

        console.print("\n[bold]2. A board[/]  (healer board add ...)")
        store = open_store(tmp)
        try:
            for tid, title, prio, deps, labels in TICKETS:
                store.add_ticket(title, id=tid, priority=prio, blocked_by=deps, labels=labels, actor="demo")
                dep = f", after {' and '.join(deps)}" if deps else ""
                console.print(f"   {tid} [dim](priority {prio}{dep})[/] {title}", highlight=False)
            store.move_ticket("T-1", lifecycle.IN_PROGRESS, actor="demo", reason="the demo starts work")
            store.comment("T-1", "red since the last dependency bump", author="demo")
            store.move_ticket("T-5", lifecycle.NEEDS_HUMAN, actor="demo", reason="flaky: a person should look")
            console.print()
            console.print(board_table(store.tickets(), store.now(), title="the board (healer board list)"))
            n_events = store.last_event_id()
        finally:
            store.close()
        console.print(f"   {n_events} events in the append-only log at {tmp / '.healer' / 'healer.db'}", highlight=False, soft_wrap=True)

        console.print("\n[bold]3. Policies[/]  (healer policy validate)")
        for f in sorted((REPO / "policies").glob("*.yaml")):
            try:
                p = load_policy(f)
                console.print(f"   [green]ok[/]  policies/{f.name}  [dim](max_iterations {p.loop.max_iterations}, "
                              f"iteration_timeout {int(p.loop.iteration_timeout // 60)}m)[/]", highlight=False)
            except InvalidInput as e:
                rc = 1
                for line in e.lines:
                    console.print(f"   [red]bad[/] {escape(line)}", highlight=False, soft_wrap=True)
        bad = tmp / "bad.yaml"
        bad.write_text(BAD_POLICY)
        console.print("   a broken policy gives one located line per problem (exit 65):")
        try:
            load_policy(bad)
        except InvalidInput as e:
            for line in e.lines:
                console.print(f"   [red]{escape(line.replace(str(tmp) + '/', ''))}[/]", highlight=False, soft_wrap=True)

        console.print("\n[bold]4. The ticket lifecycle[/]  (healer board states)")
        moves: dict[str, list[str]] = {}
        for (frm, to) in lifecycle.TRANSITIONS:
            moves.setdefault(frm, []).append(to)
        for s in lifecycle.STATES:
            console.print(f"   {s:<12} -> {', '.join(moves.get(s, [])) or '-'}", highlight=False)

        rc = max(rc, gameday_stage(console, tmp, suite=suite, report=report))

        console.print()
        console.print(Rule("next: [bold]make test[/], [bold]healer --help[/]"))
    finally:
        if keep:
            console.print(f"kept the demo fleet at {tmp}", highlight=False)
        else:
            shutil.rmtree(tmp, ignore_errors=True)  # the demo's own scratch folder, nothing else
    return rc


def gameday_stage(console: Console, tmp: Path, suite: bool = True, report: Path | None = None) -> int:
    """A demo fleet broken and healed live (its timeline as it happens), then the standard game-day suite."""
    console.print("\n[bold]5. A fleet healed live[/]  (43 tickets frozen in progress, agents gone, no worktrees)")
    sc = load(discover(["frozen-in-progress"])[0])
    r = engine.run(sc, tmp / "live")
    shown = 0
    counts: dict[str, int] = {}
    for off, kind, subject, text in r.timeline:
        counts[kind] = counts.get(kind, 0) + 1
        # a few lines of each kind, then only the totals: 43 identical lines teach nothing
        if kind in ("ticket.moved", "dispatch.launched", "notify.sent", "chaos.fault") and counts[kind] <= 4 and shown < 12:
            console.print(f"   +{int(off) // 60:>3}m  {kind:<18} {subject:<6} {escape(text)[:70]}", highlight=False)
            shown += 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:6]
    console.print("   totals: " + ", ".join(f"{k} x{n}" for k, n in top), highlight=False, soft_wrap=True)
    console.print(f"   … {len(r.timeline)} timeline entries; {'[green]healed[/]' if r.ok else '[red]NOT healed[/]'}: "
                  + "; ".join(c.message for c in r.checks[:3]), highlight=False, soft_wrap=True)

    if not suite:
        console.print("\n[bold]6. The standard game-day suite[/]: skipped (--no-suite); run it with: healer gameday run")
        return 0 if r.ok else 1
    console.print("\n[bold]6. The standard game-day suite[/]  (healer gameday run chaos/scenarios)")
    results = runner.run_all(runner.load_all(None), console=console)
    # where a user keeps what a tool made for them, not the temp folder (a main job leaves nothing there)
    report_dir = report or cache_dir() / "demo-report"
    code, written = runner.outcome(results, report_dir, report_dir / "junit.xml", console)
    console.print(f"   report: {written.get('markdown')}", highlight=False, soft_wrap=True)
    return code
