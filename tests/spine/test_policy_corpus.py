"""Every malformed policy gives exit 65 and located one-line errors, through the real CLI."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.conftest import healer
from tests.spine.conftest import MALFORMED

LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<path>\S+): expected .*, got .*$")


def _generated(tmp: Path) -> list[Path]:
    """Cases too big or too binary to commit."""
    out = []
    big = tmp / "ten_megabytes.yaml"
    with big.open("w") as f:
        f.write("# expect: (file): expected at most 1000000 bytes\nloop:\n  protected_paths:\n")
        f.write("    - tests/\n" * (10 * 1024 * 1024 // 12))
    out.append(big)
    garbage = tmp / "binary_garbage.yaml"
    garbage.write_bytes(bytes(range(256)) * 64 + os.urandom(4096))
    out.append(garbage)
    latin = tmp / "latin1.yaml"
    latin.write_bytes(b"loop:\n  kill_switch: caf\xe9\n")
    out.append(latin)
    return out


def _expectations(path: Path) -> str | None:
    try:
        first = path.read_text(errors="replace").splitlines()[0]
    except IndexError:
        return None
    return first.removeprefix("# expect: ").strip() if first.startswith("# expect: ") else None


def test_malformed_corpus_exit_65_with_located_lines(tmp_path):
    committed = sorted(MALFORMED.glob("*.yaml"))
    assert len(committed) >= 30
    files = committed + _generated(tmp_path)
    # relative names keep the lines short and the file part free of colons
    names = [os.path.relpath(f, tmp_path) for f in files]
    r = healer("policy", "validate", *names, cwd=tmp_path)
    assert r.returncode == 65, r.stderr
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    assert r.stdout.strip() == "", f"some malformed file validated: {r.stdout}"

    by_file: dict[str, list[str]] = {}
    for line in r.stderr.splitlines():
        m = LINE.match(line)
        assert m, f"not a located one-line error: {line!r}"
        by_file.setdefault(m["file"], []).append(line)
    for name, path in zip(names, files, strict=True):
        assert name in by_file, f"{name}: no error reported"
        want = _expectations(path)
        if want:
            assert any(want in ln for ln in by_file[name]), f"{name}: wanted {want!r} in {by_file[name]}"
    assert len(by_file["binary_garbage.yaml"]) == 1
    assert "expected UTF-8 text" in by_file["binary_garbage.yaml"][0]
    assert "expected UTF-8 text" in by_file["latin1.yaml"][0]
    assert len(by_file[names[committed.index(MALFORMED / "many_problems.yaml")]]) == 4


def test_missing_and_directory_are_one_line_65(tmp_path):
    r = healer("policy", "validate", str(tmp_path / "nope.yaml"), str(tmp_path))
    assert r.returncode == 65
    lines = r.stderr.splitlines()
    assert len(lines) == 2 and "no such policy file" in lines[0] and "is a directory" in lines[1]
    assert "Traceback" not in r.stderr


def test_valid_and_invalid_mixed_reports_both(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("loop:\n  max_iterations: 3\n")
    r = healer("policy", "validate", "good.yaml", os.path.relpath(MALFORMED / "zero_limit.yaml", tmp_path), cwd=tmp_path)
    assert r.returncode == 65
    assert "good.yaml: ok" in r.stdout
    assert "zero_limit.yaml:3:3: loop.max_iterations: expected at least 1, got 0" in r.stderr
