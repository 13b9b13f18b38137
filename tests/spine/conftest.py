"""Spine fixtures: paths to the repository, shipped policies and the shared fixtures."""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MALFORMED = Path(__file__).resolve().parent / "malformed"
# ../shared/fixtures sits beside the clone, in CI too
FIXTURES = REPO.parent / "shared" / "fixtures"
DEMERZEL = FIXTURES / "demerzel" / "autonomous-loop-policy.yaml"


@dataclass
class Ran:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run `healer ARGS` in this process through the real entry point (`healer.cli.main`).

    Same parser, same error handling as the child-process `healer()` helper, without paying
    for a Python start per call; the end-to-end tests still use real child processes.
    """
    from healer.cli import main

    def run(*args: str, cwd: Path | None = None, input: str | None = None) -> Ran:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        if input is not None:
            monkeypatch.setattr(sys, "stdin", io.StringIO(input))
        capsys.readouterr()
        code = main(list(args))
        cap = capsys.readouterr()
        return Ran(code, cap.out, cap.err)

    yield run
    from healer import log

    log.shutdown()  # its stderr sink points at this test's capture stream


@pytest.fixture
def demerzel_fixture() -> Path:
    vendored = Path(__file__).resolve().parents[1] / "fixtures" / "demerzel" / "autonomous-loop-policy.yaml"
    if DEMERZEL.exists():
        assert DEMERZEL.read_bytes() == vendored.read_bytes(), "tests/fixtures/demerzel is stale: copy it again"
        return DEMERZEL
    return vendored
