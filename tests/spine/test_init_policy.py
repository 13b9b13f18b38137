"""`healer init` writes the commented default policy the README promises (issue 34): the shipped
policies/default.yaml, every key commented, valid; and an installed package carries that same file (a wheel has
no policies/ folder: init there once wrote a 189-line dump of the schema with 2 comments)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest

from healer.policy import Policy, load_policy
from healer.policy.load import default_policy_path
from tests.conftest import REPO, make_repo

DEFAULT = REPO / "policies" / "default.yaml"
KEY = re.compile(r"^(\s*)(?:- )?([\w-]+):(\s|$)")


def uncommented_keys(text: str) -> list[str]:
    """Key lines with no comment of their own. A row of a flow-mapping table (`name: {…}`, `- {…}`) is
    commented by its block's header line (`rate_limits:  # per action: …`)."""
    bad: list[str] = []
    headers: list[tuple[int, bool]] = []  # (indent, commented) of the blocks we are in
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        while headers and headers[-1][0] >= indent:
            headers.pop()
        commented = re.search(r"(^|\s)#(\s|$)", line) is not None  # not the `"# {ticket}` inside a quoted value
        row = s.startswith("- {") or re.fullmatch(r"[\w-]+: \{.*\}", s)
        if not commented and not (row and headers and headers[-1][1]):
            bad.append(f"default.yaml:{n}: {s}")
        if KEY.match(line) and s.split("#", 1)[0].rstrip().endswith(":"):
            headers.append((indent, commented))
    return bad


def test_every_key_of_the_default_policy_is_commented_and_it_validates():
    text = DEFAULT.read_text()
    assert uncommented_keys(text) == []
    assert load_policy(DEFAULT) == Policy()
    assert uncommented_keys("loop:\n  stall:\n    same_state: 2   # x\n") == ["default.yaml:1: loop:", "default.yaml:2: stall:"]
    assert uncommented_keys("a:   # rows\n  b: {count: 1}\nc:\n  d: {count: 1}\n") == ["default.yaml:3: c:", "default.yaml:4: d: {count: 1}"]


def test_init_writes_the_commented_default(cli, tmp_path):
    repo = make_repo(tmp_path / "r")
    assert cli("init", cwd=repo).code == 0
    assert (repo / "healer.yaml").read_bytes() == DEFAULT.read_bytes()
    assert default_policy_path() == DEFAULT


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_an_installed_package_carries_the_commented_default_and_init_writes_it(tmp_path):
    """What a wheel holds: setuptools' build_py of a copy of the checkout (the package data, the symbolic link
    healer/policy/default.yaml followed); `healer init` run from that copy, not from the checkout."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "policies"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy)(REPO / name, src / name)
    for pkg in ("healer", "chaos"):
        shutil.copytree(REPO / pkg, src / pkg, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    lib = tmp_path / "lib"
    r = subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py", "--build-lib", str(lib)],
                       cwd=src, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    shipped = lib / "healer" / "policy" / "default.yaml"
    assert not shipped.is_symlink() and shipped.read_bytes() == DEFAULT.read_bytes()
    assert not (lib / "policies").exists()  # no policies/ folder next to the package: the file is the package's own
    fleet = make_repo(tmp_path / "fleet")
    # -S: no site, so the checkout's editable-install finder is not loaded; the dependencies come by PYTHONPATH
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(lib), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])}
    py = [sys.executable, "-S"]
    where = subprocess.run([*py, "-c", "import healer; print(healer.__file__)"], env=env, capture_output=True, text=True,
                           timeout=60, cwd=tmp_path)
    assert where.stdout.startswith(str(lib)), where.stdout + where.stderr
    r = subprocess.run([*py, "-m", "healer", "init", "--root", str(fleet)], env=env, capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (fleet / "healer.yaml").read_bytes() == DEFAULT.read_bytes()
