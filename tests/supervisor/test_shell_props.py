"""Properties of the safety boundary and the quarantine (hypothesis)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from healer import quarantine as q
from healer.clock import VirtualClock
from healer.paths import UnsafePath, confine
from healer.realpath import Resolver

SEGMENT = st.sampled_from(["..", ".", "a", "b", "link_out", "link_in", ".healer", ".git", "", "x.txt", "/", "/etc"])


def _world(base: Path) -> tuple[Path, Path]:
    root = base / "root"
    outside = base / "outside"
    (root / "a" / "b").mkdir(parents=True, exist_ok=True)
    outside.mkdir(exist_ok=True)
    (outside / "x.txt").write_text("outside")
    for name, target in (("link_out", outside), ("link_in", root / "a")):
        for d in (root, root / "a"):
            if not (d / name).is_symlink():
                os.symlink(target, d / name)
    return root, outside


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(SEGMENT, min_size=1, max_size=6), absolute=st.booleans())
def test_confine_never_returns_a_path_outside_the_root(tmp_path, parts, absolute):
    root, _ = _world(tmp_path)
    raw = "/".join(parts)
    if absolute:
        raw = str(root) + "/" + raw
    try:
        p = confine(root, raw)
    except UnsafePath:
        return
    real_root = root.resolve()
    assert p.parent.resolve().is_relative_to(real_root)
    if p.is_symlink() or p.exists():
        assert p.resolve().is_relative_to(real_root)
    rel = p.relative_to(real_root).as_posix()
    assert not rel.startswith(".git") and not rel.startswith(".healer/healer.db") and not rel.startswith(".healer/quarantine")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(paths=st.lists(st.tuples(st.lists(SEGMENT | st.just("loop"), min_size=1, max_size=5), st.booleans()), min_size=1, max_size=6))
def test_the_resolver_answers_as_resolve_does(tmp_path, paths):
    """The worktree search's cached resolve: the same path as Path.resolve() for any path (symlinks, '..', loops)."""
    root, _ = _world(tmp_path)
    if not (root / "loop").is_symlink():
        os.symlink(root / "loop", root / "loop")
    real = Resolver()
    for parts, absolute in paths:
        raw = "/".join(parts)
        raw = str(root) + "/" + raw if absolute else raw
        try:
            want = Path(raw).resolve()
        except (OSError, RuntimeError):
            continue  # a symlink loop: resolve raises; no worktree is registered there
        assert real(raw) == want and real.text(raw) == str(want), raw


NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=12).filter(lambda s: s not in (".", ".."))


@settings(max_examples=40, deadline=None)
@given(files=st.dictionaries(st.lists(NAME, min_size=1, max_size=3).map("/".join), st.binary(max_size=5000), min_size=1, max_size=5))
def test_quarantine_then_restore_is_byte_for_byte(files):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        written = {}
        for rel, data in files.items():
            p = root / "area" / rel
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(data)
            except (FileExistsError, NotADirectoryError, IsADirectoryError):
                continue  # a name used both as a file and a folder: not a real tree
            written[f"area/{rel}"] = data
        written = {k: v for k, v in written.items() if (root / k).is_file()}
        if not written:
            return
        ents = q.quarantine_many(root, list(written), "prop", VirtualClock())
        assert all(not (root / k).exists() for k in written)
        assert {e.path for e in ents} == set(written)
        q.restore(root, ents[0].batch, VirtualClock())
        for k, v in written.items():
            assert (root / k).read_bytes() == v
