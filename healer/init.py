"""`healer init`'s work: make a folder a fleet (healer/cli/misc.py is its command; `healer demo` calls it too)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from healer.clock import system
from healer.errors import Unavailable, UsageError
from healer.files import ensure_folder
from healer.store import check_url, config_path, db_path, identity, open_store, open_url, read_config, sqlite_path, write_config

_IGNORE_FORMS = {".healer", ".healer/", "/.healer", "/.healer/"}


@dataclass
class InitResult:
    root: Path
    created: list[str] = field(default_factory=list)  # what this call made (empty on a re-run)


def init_fleet(root: Path, actor: str = "human", store: str | None = None, new_board: bool = False) -> InitResult:
    """Make `root` a fleet; safe to repeat (nothing existing is overwritten). `store`: a store URL
    (postgresql://…) this host's fleet uses instead of the embedded SQLite file; checked, then kept in
    .healer/config.yaml (mode 0600: it may carry a password; it is never printed)."""
    from healer.policy.load import default_policy_path  # lazy: pulls pydantic: 117 ms of `healer --help`

    res = InitResult(root)
    pol, gi = root / "healer.yaml", root / ".gitignore"
    # every path checked before the first is made: a refusal leaves no half-made fleet behind
    if root.exists() and not root.is_dir():
        raise UsageError(f"{root}: expected the fleet's folder, found a file")
    for p, kind in ((root / ".healer", "a folder"), (pol, "a file"), (gi, "a file")):
        if p.exists() and p.is_dir() != (kind == "a folder"):
            raise UsageError(f"{p}: expected {kind}, found {'a folder' if p.is_dir() else 'a file'}")
    if not (root / ".healer").is_dir():
        res.created.append(".healer/")
    ensure_folder(root / ".healer", str(root))
    if not pol.exists():
        src = default_policy_path()  # the commented default (package data in a wheel): every key says what it does
        try:
            shutil.copyfile(src, pol)
        except FileNotFoundError:
            raise Unavailable(f"{src}: the default policy is missing from this installation (reinstall fleet-healer)") from None
        res.created.append("healer.yaml")
    text = gi.read_bytes() if gi.exists() else b""  # bytes: git reads any encoding, and so does this
    if not {f.encode() for f in _IGNORE_FORMS} & {ln.strip() for ln in text.splitlines()}:
        with gi.open("ab") as f:
            f.write((b"\n" if text and not text.endswith(b"\n") else b"") + b".healer/\n")
        res.created.append(".gitignore entry")
    if store is not None and read_config(root).get("store") != store:
        check_url(store)
        probe = open_url(store, root=root)  # reachable, and its schema migrated, before it is written down
        try:
            if not new_board:  # this fleet's board, or one that has none yet: refused before config.yaml names it
                identity.check_open(probe, root, store.split("@")[-1], identity.git_id(root), readonly=True)
        finally:
            probe.close()
        write_config(root, store=store)
        res.created.append(f"{config_path(root).relative_to(root)} (store)")
    if new_board:
        s = _new_board(root, res)
    else:
        s = open_store(root, create=True)
    try:
        s.append("fleet.init", str(root), {"actor": actor, "created": res.created, "store": s.path})
    finally:
        s.close()
    return res


def _new_board(root: Path, res: InitResult):
    """`healer init --new-board`: start over on purpose. An SQLite store that is there is moved aside (kept, never
    deleted); the new board gets a new fleet id (store and git) and continues ticket ids after the highest one an
    older board left in branches or worktrees. A PostgreSQL store must be empty (give a new schema)."""
    url = os.environ.get("HEALER_STORE_URL") or read_config(root).get("store")
    path = db_path(root) if not url else (sqlite_path(str(url)) if str(url).startswith("sqlite:") else None)
    if path is not None and path.exists():
        stamp = system().now()
        aside = path.with_name(f"{path.name}.old-{int(stamp)}")
        for suffix in ("", "-wal", "-shm"):
            p = Path(str(path) + suffix)
            if p.exists():
                os.replace(p, Path(str(aside) + suffix))
        res.created.append(f"{aside.name} (the old board, kept)")
    s = open_store(root, create=True, identity_checks=False)
    try:
        if path is None and s.tickets():
            raise UsageError(f"{s.path}: --new-board needs an empty store (this one has tickets): give a new database or schema")
        identity.stamp(s, identity.new_id(), floor=identity.old_board_floor(root), replace=True)
        fid = s.get_setting(identity.SETTING)
        if identity.in_git(root):
            identity.set_git_id(root, fid)
        res.created.append(f"a new board (fleet {fid})")
    except BaseException:
        s.close()
        raise
    return s
