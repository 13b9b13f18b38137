"""pytest plugin (entry point `healer_gameday`): game days as tests.

- `pytest chaos/scenarios` collects every scenario YAML there as one test item, which
  runs the scenario and fails with the broken expectations. The folder is outside the
  configured `testpaths`, so a plain `pytest` / `make test` does not run the suite twice
  (tests/chaos/test_suite.py runs it once, in-process).
- `--gameday-disable` runs collected scenarios with their `disable:` override applied
  (each must then fail; the test passes when it does).
- the `gameday` fixture runs a scenario given as a path, a YAML string or a dict:
  `result = gameday({"name": "x", ...})`; `result.ok`, `result.failures`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("healer-gameday")
    g.addoption("--gameday-disable", action="store_true", default=False,
                help="run collected scenarios with their `disable:` override; each must break exactly its "
                     "`disable_breaks:` (and show its `incident:`)")
    g.addoption("--gameday-report", default=None, metavar="DIR",
                help="write journal.json, report.md and report.html of the collected scenarios to DIR")


def _named(config: pytest.Config, path: Path) -> bool:
    """The file, or the folder holding it, was named on the command line (not found through testpaths):
    any folder of scenario files is collectable that way (`pytest my-gamedays/`), while `pytest tests`
    or `make test` does not pick up scenario files lying in subfolders."""
    if getattr(config, "args_source", None) == pytest.Config.ArgsSource.TESTPATHS:
        return False
    here = path.resolve()
    for a in config.args:
        arg = Path(str(a).split("::")[0])
        arg = (arg if arg.is_absolute() else Path(config.invocation_params.dir) / arg).resolve()
        if arg == here or (arg.is_dir() and arg == here.parent):  # the folder itself, not every folder below it
            return True
    return False


def _is_scenario(path: Path, config: pytest.Config | None = None) -> bool:
    if path.suffix not in (".yaml", ".yml"):
        return False
    if path.parent.name != "scenarios" and not (config is not None and _named(config, path)):
        return False
    from healer.policy.yamlpos import YamlProblem, load_path  # lazy: 40 ms (-X importtime, sqlite3 via healer.errors), as below

    try:
        data = load_path(path).data
    except (OSError, YamlProblem):
        return True  # let the item report the located error
    return isinstance(data, dict) and "expect" in data and "name" in data


def pytest_collect_file(parent: pytest.Collector, file_path: Path):
    if _is_scenario(file_path, parent.config):
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


_RESULTS = pytest.StashKey[list]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_RESULTS] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    out = session.config.getoption("--gameday-report")
    results = session.config.stash.get(_RESULTS, [])
    if out and results:
        from chaos import report  # lazy: 610 ms (-X importtime) that every pytest start would pay (a pytest11 entry point)

        written = report.write(results, out)
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line("gameday report: " + ", ".join(str(p) for p in written.values()))


class ScenarioFile(pytest.File):
    def collect(self):
        yield ScenarioItem.from_parent(self, name=self.path.stem)


class GamedayFailed(Exception):
    pass


class ScenarioItem(pytest.Item):
    def runtest(self) -> None:
        from chaos import engine  # lazy: 480 ms (-X importtime) that every pytest start would pay (a pytest11 entry point)
        from chaos.scenario import load  # lazy: 170 ms, as above

        disabled = bool(self.config.getoption("--gameday-disable"))
        sc = load(self.path)
        r = engine.run(sc, disabled=disabled)
        self.config.stash.setdefault(_RESULTS, []).append(r)
        self.user_properties.append(("wall_s", round(r.wall, 3)))
        if disabled:
            if r.status == "error":
                raise GamedayFailed(f"{sc.name} ({sc.mode}, seed {r.seed}), disabled: error: {r.error}")
            if r.ok:
                raise GamedayFailed(f"{sc.name}: still passes with its feature disabled ({sc.disable}); the suite cannot fail")
            broken = {c.name for c in r.failures}
            if sc.disable_breaks and not sc.broke_as_declared(broken):
                raise GamedayFailed(f"{sc.name}: disabled, broke {sorted(broken)}, but disable_breaks names "
                                    f"{sorted(sc.disable_breaks)}: it fails for another reason")
            bad = [c.message for c in r.incident if not c.ok]
            if bad:
                raise GamedayFailed(f"{sc.name}: disabled, the incident did not show: " + "; ".join(bad))
            return
        if not r.ok:
            lines = [r.error] if r.error else [c.message for c in r.failures]
            raise GamedayFailed(f"{sc.name} ({sc.mode}, seed {r.seed}):\n  " + "\n  ".join(str(x) for x in lines))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, GamedayFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, 0, f"gameday: {self.name}"


@pytest.fixture
def gameday(tmp_path: Path):
    """Run a custom scenario: a path, YAML text, or a dict. Returns a chaos.engine.Result."""
    from chaos import engine  # lazy: 480 ms, as above
    from chaos.scenario import load  # lazy: 170 ms, as above

    def run(spec: str | Path | dict[str, Any], *, disabled: bool = False, seed: int | None = None, overrides: dict | None = None):
        if isinstance(spec, dict):
            p = tmp_path / "scenarios" / f"{spec.get('name', 'custom')}.yaml"
            p.parent.mkdir(exist_ok=True)
            p.write_text(yaml.safe_dump(spec, sort_keys=False))
        elif isinstance(spec, Path) or (isinstance(spec, str) and "\n" not in spec and spec.endswith((".yaml", ".yml"))):
            p = Path(spec)
        else:
            p = tmp_path / "scenarios" / "custom.yaml"
            p.parent.mkdir(exist_ok=True)
            p.write_text(str(spec))
        sc = load(p)
        return engine.run(sc, tmp_path / "run", seed=seed, disabled=disabled, overrides=overrides)

    return run
