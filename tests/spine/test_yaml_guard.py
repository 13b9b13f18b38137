"""One guarded YAML loader (healer/policy/yamlpos.py) for everything healer and chaos read (issue 39 item 5).

Before it, `healer gameday run exp.yaml` with an alias bomb in a Chaos Toolkit experiment exited 70 (MemoryError)
after 111 s: chaostoolkit-lib's own `yaml.safe_load` had no guard. Now every entry point refuses an alias bomb, a
document of more values than the guard allows, a deeply nested document (YAML or JSON) and a file over 1 MB with one
`FILE:LINE:COL: key.path: expected …, got …` line and exit 65, without building the document.
"""

from __future__ import annotations

import ast
import json
import re
import time
from pathlib import Path

import pytest

from healer.policy import yamlpos
from tests.conftest import healer
from tests.spine.conftest import REPO

# calls and names that parse YAML: only healer/policy/yamlpos.py may use them
LOADS = {"load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all", "full_load_all", "unsafe_load_all",
         "compose", "compose_all", "parse", "scan"}
LOADERS = {"Loader", "SafeLoader", "FullLoader", "UnsafeLoader", "BaseLoader", "CLoader", "CSafeLoader", "CFullLoader",
           "CUnsafeLoader", "CBaseLoader"}
# loaders of other libraries that read YAML with an unguarded yaml.safe_load
FOREIGN = {("chaoslib.loader", "load_experiment"), ("chaoslib.loader", "parse_experiment_from_file")}
ALLOWED = {REPO / "healer" / "policy" / "yamlpos.py"}


def violations(source: str, filename: str) -> list[str]:
    tree = ast.parse(source, filename)
    yaml_names: set[str] = set()
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "yaml":
                    yaml_names.add(a.asname or "yaml")
                if a.name == "chaoslib.loader":
                    out.append(f"{filename}:{node.lineno}: import chaoslib.loader")
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if node.module == "yaml" and (a.name in LOADS | LOADERS or a.name == "*"):
                    out.append(f"{filename}:{node.lineno}: from yaml import {a.name}")
                if (node.module, a.name) in FOREIGN or (node.module == "chaoslib" and a.name == "loader"):
                    out.append(f"{filename}:{node.lineno}: from {node.module} import {a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in yaml_names:
            if node.attr in LOADS | LOADERS:
                out.append(f"{filename}:{node.lineno}: {node.value.id}.{node.attr}")
    return out


def test_no_module_but_yamlpos_parses_yaml():
    found = []
    for pkg in ("healer", "chaos"):
        for f in sorted((REPO / pkg).rglob("*.py")):
            if f not in ALLOWED:
                found += violations(f.read_text(), str(f.relative_to(REPO)))
    assert not found, "YAML read outside healer/policy/yamlpos.py (use load_one/load_path/load_data):\n" + "\n".join(found)


def test_the_scan_catches_every_form():
    bad = """
import yaml
import yaml as y
from yaml import safe_load, CSafeLoader
from chaoslib.loader import load_experiment
import chaoslib.loader
yaml.safe_load("a: 1")
y.load("a: 1", Loader=y.SafeLoader)
yaml.compose("a")
yaml.safe_dump({})
"""
    found = violations(bad, "bad.py")
    assert len(found) == 8, found
    assert not any("safe_dump" in f for f in found)


def _bomb(head: str) -> str:
    """Nine lines, 10^9 values once expanded ("billion laughs")."""
    lines = [head, 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


def _deep_yaml(head: str) -> str:
    return head + "\nx: " + "[" * 5000 + "]" * 5000 + "\n"


def _deep_json() -> str:
    return '{"title": "t", "method": [], "x": ' + "[" * 100_000 + "]" * 100_000 + "}"


def _many(head: str) -> str:
    return head + "\nx: [" + ", ".join(["1"] * 200_000) + "]\n"


POLICY_HEAD = "version: 1"
SCENARIO_HEAD = "name: bomb\nmode: sim\nexpect: []"
CTK_HEAD = "title: bomb\nmethod: []"
ONE_LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<path>\S+): expected at most .*, got .*$")


@pytest.mark.parametrize("text", [_bomb("a: 1"), _deep_yaml("a: 1"), _many("a: 1"), "k: " + "v" * 1_100_000],
                         ids=["alias-bomb", "deep", "many-values", "over-1MB"])
def test_the_guard_refuses_before_building(tmp_path, text):
    """In-process: the guard's own CPU time, whatever the machine's load (wall time is the CLI test's)."""
    f = tmp_path / "doc.yaml"
    f.write_text(text)
    start = time.process_time()
    with pytest.raises(yamlpos.OverLimit) as e:
        yamlpos.load_path(f)
    assert time.process_time() - start < 1.0
    assert e.value.problem.message.startswith("expected at most ")


def test_json_is_guarded_too(tmp_path):
    for name, text in (("deep.json", _deep_json()), ("many.json", json.dumps({"x": [1] * 20_000}))):
        f = tmp_path / name
        f.write_text(text)
        with pytest.raises(yamlpos.OverLimit):
            yamlpos.load_path(f)
    dup = tmp_path / "dup.json"
    dup.write_text('{"a": 1, "a": 2}')
    with pytest.raises(yamlpos.YamlProblem, match="expected each key once"):
        yamlpos.load_path(dup)


def test_a_document_just_under_the_limits_loads(tmp_path):
    f = tmp_path / "ok.yaml"
    f.write_text("x: [" + ", ".join(["1"] * (yamlpos.MAX_VALUES - 100)) + "]\n"
                 + "y: " + "[" * (yamlpos.MAX_DEPTH - 1) + "]" * (yamlpos.MAX_DEPTH - 1) + "\n")
    data = yamlpos.load_path(f).data
    assert isinstance(data, dict) and len(data["x"]) == yamlpos.MAX_VALUES - 100


def _runbook(front: str) -> str:
    prose = "".join(f"## {h}\n\nText.\n\n" for h in ("Symptom", "Cause", "What healer does", "What a human does"))
    return "---\n" + front + "---\n# Bomb\n\n" + prose


def _nested(head: str, key: str, text: str) -> str:
    """`text` indented under `key`: one top-level block (a Demerzel file is read block by block)."""
    return head + "\n" + key + ":\n" + "".join("  " + ln + "\n" for ln in text.splitlines())


# (command, file name, text): each entry point that reads YAML or JSON a user hands it
ENTRY_POINTS = [
    (["policy", "validate"], "healer.yaml", _bomb(POLICY_HEAD)),
    (["policy", "validate"], "healer.yaml", _deep_yaml(POLICY_HEAD)),
    (["policy", "import", "demerzel"], "demerzel.yaml",
     _nested("name: loop-policy\niteration_limits: {default_max: 3}", "bomb", _bomb("a: 1"))),
    (["runbook", "check"], "bomb.md", _runbook(_bomb("id: bomb"))),
    (["gameday", "validate"], "scenario.yaml", _bomb(SCENARIO_HEAD)),
    (["gameday", "validate"], "scenario.yaml", _many(SCENARIO_HEAD)),
    (["gameday", "validate"], "experiment.yaml", _bomb(CTK_HEAD)),
    (["gameday", "run"], "experiment.yaml", _bomb(CTK_HEAD)),
    (["gameday", "run"], "scenario.yaml", _deep_yaml(SCENARIO_HEAD)),
    (["gameday", "validate"], "experiment.json", _deep_json()),
    (["gameday", "run"], "experiment.json", _deep_json()),
    (["gameday", "run"], "experiment.json", json.dumps({"title": "t", "method": [], "x": [1] * 20_000})),
]


@pytest.mark.parametrize(("cmd", "name", "text"), ENTRY_POINTS,
                         ids=[f"{' '.join(c)}-{n}-{i}" for i, (c, n, _) in enumerate(ENTRY_POINTS)])
@pytest.mark.long  # 17 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_every_entry_point_refuses_with_one_line(tmp_path, cmd, name, text):
    (tmp_path / name).write_text(text)
    r = healer(*cmd, name, cwd=tmp_path, timeout=300)
    assert r.returncode == 65, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    m = ONE_LINE.match(lines[0])
    assert m and m["file"].endswith(name), lines[0]


def test_store_config_is_guarded(tmp_path):
    (tmp_path / ".healer").mkdir()
    (tmp_path / ".healer" / "config.yaml").write_text(_bomb("store: sqlite"))
    r = healer("store", "info", cwd=tmp_path)
    assert r.returncode in (64, 65), r.stderr
    assert "expected at most" in r.stderr and "config.yaml" in r.stderr and "Traceback" not in r.stderr


def test_pytest_plugin_sniffs_through_the_guard(tmp_path):
    from chaos.pytest_plugin import _is_scenario

    folder = tmp_path / "scenarios"
    folder.mkdir()
    bomb = folder / "bomb.yaml"
    bomb.write_text(_bomb(SCENARIO_HEAD))
    start = time.process_time()
    assert _is_scenario(bomb)  # collected, so its item reports the located line
    assert time.process_time() - start < 1.0
    plain = folder / "plain.yaml"
    plain.write_text("a: 1\n")
    assert not _is_scenario(Path(plain))
