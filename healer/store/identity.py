"""A store has an identity: the fleet id, written at `healer init` into the store (setting `fleet.id`) and beside it
in git (`healer.fleetid` in the fleet root's repository config, `.git/config`), so a store that is not the fleet's
is refused instead of silently becoming its board:

- the fleet's git says it had a store, and the store is missing, empty (0 bytes) or has no id: a lost or wiped
  board. Refused with one line, exit 74: `healer store restore FILE` puts a copy back, `healer init --new-board`
  starts over (the old file kept aside, ticket ids continuing after the old board's);
- the store carries another fleet's id: refused with one line, exit 65 (the wrong URL, another fleet's file);
- a fleet made before identities (or a host's clone joining a PostgreSQL board) gets one on first open.

The rule (`judge`) is pure; the rest reads and writes git's config and the store's setting.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

from healer import git
from healer.errors import HOST_TROUBLE, INVALID_INPUT, HealerError

GIT_KEY = "healer.fleetid"
SETTING = "fleet.id"
ID_FLOOR = "tickets.id_floor"  # ticket ids of a new board continue after this number (an older board's T-N remain)


class StoreRefused(HealerError):
    pass


# -- the rule (pure) ---------------------------------------------------------------
def judge(git_id: str | None, store_id: str | None, *, exists: bool, empty: bool) -> tuple[str, int | None]:
    """What to do with a store: ("ok"|"adopt"|"stamp"|"missing"|"empty"|"foreign", exit code when refused)."""
    if not git_id:
        if not exists or empty:
            return "stamp", None  # a new fleet (or one from before identities): the store gets one
        return ("adopt", None) if store_id else ("stamp", None)
    if not exists:
        return "missing", HOST_TROUBLE
    if empty or not store_id:
        return "empty", HOST_TROUBLE
    if store_id != git_id:
        return "foreign", INVALID_INPUT
    return "ok", None


def refusal(verdict: str, where: str, git_id: str, store_id: str | None) -> str:
    fix = "`healer store restore FILE` puts a copy of the board back; `healer init --new-board` starts a new one"
    if verdict == "missing":
        return f"{where}: no store, but this fleet had one (fleet {git_id}, git config {GIT_KEY}): {fix}"
    if verdict == "empty":
        return f"{where}: the store is empty, but this fleet had a board (fleet {git_id}, git config {GIT_KEY}): {fix}"
    return (f"{where}: the store belongs to another fleet ({store_id}, this fleet is {git_id} in git config "
            f"{GIT_KEY}): check the store URL, or {fix}")


# -- git's side ----------------------------------------------------------------------
def _git(root: Path, *args: str):
    try:
        return git.run(root, *args, check=False, timeout=30)
    except git.GitError:
        return None


def in_git(root: Path) -> bool:
    """The fleet root is a repository's own top: its `.git` a folder. Not a folder inside some other repository,
    and not a linked worktree (its `.git` a file): a worktree shares the repository's config, so a loop run's own
    store there would read the fleet's id as its own and be refused as a lost board."""
    return (Path(root) / ".git").is_dir()


def git_id(root: Path) -> str | None:
    if not in_git(root):
        return None
    o = _git(root, "config", "--local", "--get", GIT_KEY)
    return o.stdout.strip() or None if o is not None and o.code == 0 else None


def set_git_id(root: Path, fid: str) -> None:
    o = _git(root, "config", "--local", GIT_KEY, fid)
    if o is None or o.code != 0:
        raise HealerError(f"{root}: cannot write git config {GIT_KEY}: {o.text if o is not None else 'no git'}", HOST_TROUBLE)


def new_id() -> str:
    return uuid.uuid4().hex


# -- the store's side --------------------------------------------------------------------
def sqlite_state(path: Path) -> tuple[bool, bool]:
    """(exists, empty) of an SQLite store file, before it is opened (opening makes a missing file)."""
    try:
        return True, path.stat().st_size == 0
    except FileNotFoundError:
        return False, True


def check_before_open(root: Path, path: Path, where: str, gid: str | None) -> None:
    """An SQLite store: refuse a missing or 0-byte file for a fleet that had one (`gid`), before SQLite makes it."""
    if not gid:
        return
    exists, empty = sqlite_state(path)
    if not exists or empty:
        verdict, code = judge(gid, None, exists=exists, empty=empty)
        raise StoreRefused(refusal(verdict, where, gid, None), code)


def check_open(store, root: Path, where: str, gid: str | None, *, readonly: bool = False) -> None:
    """After open: the store's id against git's (`gid`; refused with one line), or both stamped / adopted.
    A read-only open refuses as any other but writes nothing."""
    if gid is None and (readonly or not in_git(root)):
        return
    sid = store.get_setting(SETTING)
    verdict, code = judge(gid, sid, exists=True, empty=False)
    if code is not None:
        raise StoreRefused(refusal(verdict, where, gid or "", sid), code)
    if readonly:
        return
    try:
        if verdict == "adopt":
            set_git_id(root, sid)
        elif verdict == "stamp":
            stamp(store, new_id(), floor=old_board_floor(root))
            set_git_id(root, store.get_setting(SETTING))
    except HealerError:  # git's config could not be written (read-only .git): the next open tries again
        pass


_SET = "INSERT INTO settings(key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value=excluded.value"


def stamp(store, fid: str, *, floor: int = 0, replace: bool = False) -> None:
    """Write the fleet id into the store, unless one is there (two hosts stamping at once: the first wins), and
    the ticket-id floor an older board left (its branches and worktrees keep their ids: a new T-N never reuses one)."""
    with store.tx(fenced=False) as db:
        if replace:
            db.execute(_SET, (SETTING, _json(fid)))
            wrote = 1
        else:  # two hosts stamping at once: the first insert wins, the other reads it back (never overwrites)
            wrote = db.execute("INSERT INTO settings(key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
                               (SETTING, _json(fid))).rowcount
        if wrote:
            if floor:
                db.execute(_SET, (ID_FLOOR, _json(floor)))
            store._event(db, "fleet.identity", SETTING, {"id": fid, "ticket_id_floor": floor})


def _json(v) -> str:
    return json.dumps(v)


# -- ids of an older board ------------------------------------------------------------------
_TICKET_NUM = re.compile(r"(?:^|/)T-(\d+)$")


def old_board_floor(root: Path) -> int:
    """The highest ticket number an older board left behind: branches `healer/T-N` (local and remote) and
    worktrees `.healer/worktrees/T-N`, kept aside ones included. A new board's ids start after it."""
    top = 0
    o = _git(root, "for-each-ref", "--format=%(refname)", "refs/heads/healer/", "refs/remotes/")
    if o is not None and o.code == 0:
        for ref in o.stdout.splitlines():
            m = _TICKET_NUM.search(ref)
            if m and "/healer/" in ref:
                top = max(top, int(m.group(1)))
    for d in ("worktrees", "worktrees-stale"):
        folder = root / ".healer" / d
        if folder.is_dir():
            for p in folder.iterdir():
                m = re.match(r"T-(\d+)", p.name)
                if m:
                    top = max(top, int(m.group(1)))
    return top
