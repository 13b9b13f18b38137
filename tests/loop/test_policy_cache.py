"""The cache of validated policies (healer/policy/cache.py): a hit answers exactly what pydantic
answered, any change to the file or the schema is a miss, a bad policy is never cached, a broken
cache file is only a miss, and a hit imports neither pydantic nor YAML."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from healer.errors import InvalidInput
from healer.policy import cache
from healer.policy.load import load_policy
from healer.policy.yamlpos import MAX_BYTES

POLICY = """\
loop:
  max_iterations: 4
  iteration_timeout: 90s
  protected_paths: [tests/, docs/api.md]
  stall: {same_failure: 2}
  agent: {preset: command, command: [python3, agent.py, "{prompt_file}"]}
  gates:
    - {name: lint, run: [ruff, check], timeout: 1m}
    - {name: tests, run: [pytest, -q]}
fleet: {heartbeat: 10s}
health: {stale_labels: {to-review: 3h}}
"""


@pytest.fixture
def cdir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("HEALER_CACHE_DIR", str(d))
    return d


def test_hit_answers_what_pydantic_answered(tmp_path, cdir):
    p = tmp_path / "healer.yaml"
    p.write_text(POLICY)
    real = load_policy(p)
    assert real.model_dump() == real.model_dump(mode="json")  # what lets the cache keep one dump
    miss = cache.load(p)
    assert (cdir / "policies.json").is_file()
    hit = cache.load(p)
    for view in (miss, hit):
        assert view.model_dump(mode="json") == real.model_dump(mode="json")
        assert view.model_dump() == real.model_dump()
        assert view.loop.model_dump(mode="json") == real.loop.model_dump(mode="json")
        assert view.loop.iteration_timeout == 90.0 and view.fleet.heartbeat == 10.0
        assert [(g.name, g.run, g.timeout) for g in view.loop.gates] == [("lint", ["ruff", "check"], 60.0),
                                                                         ("tests", ["pytest", "-q"], 600.0)]
        assert view.loop.stall.same_failure == 2 and view.loop.stall.same_state == real.loop.stall.same_state
        assert view.loop.agent.command == ["python3", "agent.py", "{prompt_file}"]
        assert view.health.stale_labels == {"to-review": 10800.0}  # a dict field stays a dict
        assert view.loop.run_timeout is None
    with pytest.raises(AttributeError):
        hit.loop.max_iterations = 99
    with pytest.raises(AttributeError):
        _ = hit.loop.no_such_field


def test_default_policy_is_cached_too(cdir):
    from healer.policy.schema import Policy

    assert cache.load(None).model_dump(mode="json") == Policy().model_dump(mode="json")
    assert cache.load(None).model_dump(mode="json") == Policy().model_dump(mode="json")


def test_edit_is_a_miss_and_bad_policy_never_cached(tmp_path, cdir):
    p = tmp_path / "healer.yaml"
    p.write_text(POLICY)
    assert cache.load(p).loop.max_iterations == 4
    p.write_text(POLICY.replace("max_iterations: 4", "max_iterations: 5"))
    assert cache.load(p).loop.max_iterations == 5
    before = (cdir / "policies.json").read_text()
    p.write_text(POLICY.replace("max_iterations: 4", "max_iterations: 0"))
    for _ in range(2):  # same located error each time: the failure is not remembered
        with pytest.raises(InvalidInput) as e:
            cache.load(p)
        assert "loop.max_iterations: expected at least 1, got 0" in str(e.value)
    assert (cdir / "policies.json").read_text() == before
    with pytest.raises(InvalidInput, match="no such policy file"):
        cache.load(tmp_path / "missing.yaml")


def test_schema_change_is_a_miss(tmp_path, cdir, monkeypatch):
    p = tmp_path / "healer.yaml"
    p.write_text(POLICY)
    fake = tmp_path / "schema_part.py"
    fake.write_text("A = 1\n")
    real_sources = cache._schema_sources
    monkeypatch.setattr(cache, "_schema_sources", lambda: [*real_sources(), fake])
    k1 = cache.key_for(p.read_bytes())
    fake.write_text("A = 2\n")
    assert cache.key_for(p.read_bytes()) != k1
    assert {s.name for s in real_sources()} >= {"schema.py", "load.py", "yamlpos.py", "durations.py", "version.py"}


def test_a_poisoned_or_broken_cache_file_is_only_a_miss(tmp_path, cdir):
    p = tmp_path / "healer.yaml"
    p.write_text(POLICY)
    cdir.mkdir()
    for junk in ("{not json", "[]", json.dumps({"format": 1, "entries": {cache.key_for(p.read_bytes()): {"py": 3}}})):
        (cdir / "policies.json").write_text(junk)
        assert cache.load(p).loop.max_iterations == 4
    assert [f.name for f in cdir.iterdir()] == ["policies.json"]  # no temp file left behind


def test_bounded(tmp_path, cdir):
    p = tmp_path / "healer.yaml"
    for i in range(cache.MAX_ENTRIES + 5):
        p.write_text(POLICY.replace("max_iterations: 4", f"max_iterations: {i + 1}\n  absolute_max: 100"))
        cache.load(p)
    entries = json.loads((cdir / "policies.json").read_text())["entries"]
    assert len(entries) == cache.MAX_ENTRIES
    assert cache.load(p).loop.max_iterations == cache.MAX_ENTRIES + 5  # the newest kept


def test_same_size_cap_as_the_loader():
    assert cache.MAX_BYTES == MAX_BYTES


def test_a_hit_imports_neither_pydantic_nor_yaml(tmp_path, cdir):
    p = tmp_path / "healer.yaml"
    p.write_text(POLICY)
    cache.load(p)
    code = ("import sys\nfrom healer import launch\nimport healer.loop.runner, healer.loop.start, healer.store\n"
            "from healer.policy.cache import load\n"
            f"assert load({str(p)!r}).loop.max_iterations == 4\n"
            "heavy = sorted(m for m in ('pydantic', 'yaml', 'loguru', 'typer', 'rich', 'psutil', 'argparse') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_a_cached_policy_copies_with_an_update_like_a_model(tmp_path):
    """The loop adds a CLI's model endpoint to loop.sandbox_network_allow with model_copy(update=...): a cache hit
    (a Frozen view) answers it too, and the original stays as it was."""
    from healer.policy.cache import Frozen

    f = Frozen({"sandbox_network_allow": [], "max_iterations": 3}, {"sandbox_network_allow": [], "max_iterations": 3})
    g = f.model_copy(update={"sandbox_network_allow": ["127.0.0.1:9"]})
    assert g.sandbox_network_allow == ["127.0.0.1:9"] and g.max_iterations == 3
    assert f.sandbox_network_allow == []
    with pytest.raises(AttributeError):
        f.model_copy(update={"no_such_key": 1})
