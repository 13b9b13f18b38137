"""healer/loop/objects.py: what sandboxed programs wrote to their own object folder reaches the repository's
store only as what its name says. Real git writes the objects (GIT_OBJECT_DIRECTORY), real git reads them back."""

from __future__ import annotations

import os
import subprocess
import zlib
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from healer.git import private_objects_env
from healer.loop import objects
from tests.conftest import git, make_repo


def _setup(tmp_path):
    repo = make_repo(tmp_path / "r")
    private = tmp_path / "private"
    private.mkdir()
    return repo, private, repo / ".git" / "objects", tmp_path / "q"


def _git_env(private, store):
    return {**os.environ, **private_objects_env(private, store)}


def _agent_pack(repo, private, store, text: str) -> Path:
    """What an agent that commits and then packs leaves in its own object folder: one pack (and its index)."""
    env = _git_env(private, store)
    (repo / "big.txt").write_text(text * 1000)
    subprocess.run(["git", "add", "big.txt"], cwd=repo, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "agent"], cwd=repo, env=env, check=True)
    subprocess.run(["git", "repack", "-q", "-d"], cwd=repo, env=env, check=True)
    [pack] = (private / "pack").glob("*.pack")
    return pack


def test_objects_a_programs_git_wrote_are_adopted_and_readable(tmp_path):
    repo, private, store, q = _setup(tmp_path)
    (repo / "new.txt").write_text("new\n")
    env = _git_env(private, store)
    subprocess.run(["git", "add", "new.txt"], cwd=repo, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "agent"], cwd=repo, env=env, check=True)
    head = git(repo, "rev-parse", "HEAD")
    assert subprocess.run(["git", "cat-file", "-e", head], cwd=repo).returncode != 0  # only in the private folder
    assert objects.adopt(repo, private, store, q) == []
    assert git(repo, "cat-file", "-p", f"{head}:new.txt") == "new"
    assert git(repo, "fsck", "--no-dangling") == ""
    assert not any(p.is_file() for p in private.rglob("*"))  # adopted: moved, nothing left to adopt twice


def test_a_pack_is_indexed_again_from_its_content(tmp_path):
    repo, private, store, q = _setup(tmp_path)
    _agent_pack(repo, private, store, "x\n")
    head = git(repo, "rev-parse", "HEAD")
    assert objects.adopt(repo, private, store, q) == []
    assert git(repo, "cat-file", "-t", head) == "commit"
    assert not list((private / "pack").glob("*.pack"))


def test_a_forged_loose_object_is_set_aside_and_the_real_one_kept(tmp_path):
    repo, private, store, q = _setup(tmp_path)
    oid = git(repo, "rev-parse", "HEAD:README.md")
    body = b"forged\n"
    (private / oid[:2]).mkdir()
    (private / oid[:2] / oid[2:]).write_bytes(zlib.compress(b"blob %d\0" % len(body) + body))
    new = "0" * 40  # a name no content has: refused too, even with nothing of that name in the store
    (private / "00").mkdir()
    (private / "00" / new[2:]).write_bytes(zlib.compress(b"blob 1\0x"))
    refused = objects.adopt(repo, private, store, q)
    assert sorted(refused) == sorted([f"{oid[:2]}/{oid[2:]}", f"00/{new[2:]}"])
    assert git(repo, "cat-file", "blob", oid) == "# demo"
    assert (q / f"objects-{oid}").read_bytes().startswith(b"x")  # kept, as the agent wrote it
    assert subprocess.run(["git", "cat-file", "-e", new], cwd=repo).returncode != 0


def test_a_small_file_that_inflates_to_a_lot_is_refused_without_holding_it(tmp_path):
    repo, private, store, q = _setup(tmp_path)
    bomb = zlib.compress(b"blob 10\0" + b"\0" * (64 << 20), 9)  # says 10 bytes, inflates to 64 MiB
    assert len(bomb) < 1 << 20
    (private / "ab").mkdir()
    (private / "ab" / ("c" * 38)).write_bytes(bomb)
    assert objects.adopt(repo, private, store, q) == ["ab/" + "c" * 38]


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300), st.sampled_from([b"blob", b"tree", b"commit", b"tag", b"blub"]),
       st.integers(min_value=-2, max_value=2), st.booleans())
def test_verified_is_exactly_gits_rule(tmp_path_factory, content, kind, size_off, truncate):
    """A loose object is accepted iff it is a complete zlib stream of `kind size\\0content` with the size right and
    its SHA-1 its name: compared with what `git hash-object` answers for the same content."""
    from healer import digest

    tmp = tmp_path_factory.mktemp("v")
    size = max(0, len(content) + size_off)
    head = kind + b" %d\0" % size
    data = zlib.compress(head + content)
    if truncate:
        data = data[:-3]
    oid = digest.sha1(b"blob %d\0" % len(content) + content).hexdigest()
    f = tmp / "o"
    f.write_bytes(data)
    want = kind == b"blob" and size == len(content) and not truncate
    assert objects._verified(str(f), oid) is want


def test_a_corrupted_pack_is_set_aside_and_nothing_of_it_stored(tmp_path):
    repo, private, store, q = _setup(tmp_path)
    pack = _agent_pack(repo, private, store, "y\n")
    data = bytearray(pack.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: the content no longer matches what the pack claims
    pack.write_bytes(bytes(data))
    head = git(repo, "rev-parse", "HEAD")
    packs_before = sorted((store / "pack").glob("*"))
    assert objects.adopt(repo, private, store, q) == [f"pack/{pack.name}"]
    assert (q / f"objects-{pack.name}").exists()
    assert sorted((store / "pack").glob("*")) == packs_before
    assert subprocess.run(["git", "cat-file", "-e", head], cwd=repo).returncode != 0


def test_a_pack_moved_without_its_index_by_a_killed_runner_gets_one_made_from_its_content(tmp_path):
    repo, private, store, q = _setup(tmp_path)
    pack = _agent_pack(repo, private, store, "z\n")
    os.replace(pack, store / "pack" / pack.name)  # what a kill between the two moves leaves
    head = git(repo, "rev-parse", "HEAD")
    assert subprocess.run(["git", "cat-file", "-e", head], cwd=repo).returncode != 0
    assert objects.adopt(repo, private, store, q) == []
    assert (store / "pack" / pack.name).with_suffix(".idx").exists()
    assert git(repo, "cat-file", "-t", head) == "commit"
    assert not list((private / "pack").glob("*"))


def test_the_same_forgery_twice_keeps_both_copies(tmp_path):
    repo, private, store, q = _setup(tmp_path)
    oid = git(repo, "rev-parse", "HEAD:README.md")
    for text in (b"one\n", b"two\n"):
        (private / oid[:2]).mkdir(exist_ok=True)
        (private / oid[:2] / oid[2:]).write_bytes(zlib.compress(b"blob %d\0" % len(text) + text))
        assert objects.adopt(repo, private, store, q) == [f"{oid[:2]}/{oid[2:]}"]
    kept = sorted(zlib.decompress(f.read_bytes()) for f in q.iterdir())
    assert kept == [b"blob 4\0one\n", b"blob 4\0two\n"]
