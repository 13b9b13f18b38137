"""How the board prints: the ticket table and the age and state cells, shared by `healer board` (healer/cli/board.py)
and `healer demo` (healer/demo.py), below both."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from healer.spend import usd

_STATE_STYLE = {"queued": "cyan", "in_progress": "yellow", "review": "magenta", "done": "green",
                "blocked": "red", "needs_human": "bold red", "closed": "dim"}


def age(seconds: float) -> str:
    """Two largest units, for tables: 45s, 12m, 3h05m, 2d04h."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def styled_state(state: str) -> str:
    return f"[{_STATE_STYLE.get(state, 'white')}]{state}[/]"


def board_table(tickets, now: float, title: str | None = None, spend: dict[str, float] | None = None) -> Table:
    """The board; with `spend` (ticket -> USD, healer/spend.py) a spend column too."""
    cols = ["id", "state", "pri", "title", "labels", "blocked by", "updated"] + (["spend"] if spend is not None else [])
    t = Table(*cols, title=title, title_justify="left")
    for tk in tickets:
        labels = ", ".join(f"{k} ({age(now - v)})" for k, v in tk.labels.items())
        # user text is never markup: a title like "[WIP]" prints as written
        row = [escape(tk.id), styled_state(tk.state), str(tk.priority), escape(tk.title), escape(labels),
               escape(", ".join(tk.blocked_by)), age(now - tk.updated_at) + " ago"]
        t.add_row(*row, *([usd(spend.get(tk.id, 0.0))] if spend is not None else []))
    if not tickets:
        t.add_row(*["", "", "", "[dim]no tickets[/]"] + [""] * (len(cols) - 4))
    return t
