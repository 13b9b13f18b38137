"""The real Claude Code and Codex CLIs under healer, against the scripted model kit (chaos/agents/models).

The CLIs come from the npm registry, pinned (.ci/run installs them into .venv/agents-cli; `make agents-cli`
does the same here). A test that needs one skips with the reason on a workstation and FAILS under CI=true.
Each test gets its own HOME (the user's config the presets seed from) and a model server on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from chaos.agents.models.server import ModelServer
from tests.loop.conftest import loop_repo

REPO = Path(__file__).resolve().parents[2]
CLI_BIN = Path(os.environ.get("HEALER_AGENT_CLI_BIN") or REPO / ".venv" / "agents-cli" / "bin")
PINS = {"claude": "2.1.332", "codex": "0.169.0"}  # .ci/run installs exactly these
PY = sys.executable
BUGGY = "def add(a, b):\n    return a - b\n"
TEST = "import sys\nsys.path.insert(0, '.')\nimport calc\nassert calc.add(2, 2) == 4, calc.add(2, 2)\nprint('ok')\n"
CLAUDE_MODEL = "claude-sonnet-4-5"


def cli_path() -> str:
    return f"{CLI_BIN}{os.pathsep}{os.environ.get('PATH', '')}"


def need_cli(name: str) -> str:
    exe = shutil.which(name, path=cli_path())
    if exe is None:
        why = f"the {name} CLI is not installed (npm install -g --prefix .venv/agents-cli: see .ci/run)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {why}")
        pytest.skip(reason=why)
    return exe


def need_bwrap() -> None:
    from healer import sandbox

    why = sandbox.unavailable()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and bubblewrap does not work: {why}")
        pytest.skip(reason=f"bubblewrap does not work here: {why}")


def calc_repo(path: Path) -> Path:
    return loop_repo(path, {"calc.py": BUGGY, "tests/test_calc.py": TEST})


def gate() -> dict:
    return {"name": "tests", "run": [PY, "tests/test_calc.py"], "timeout": "20s"}


def agent_env(preset: str, home: Path, model: ModelServer) -> dict:
    """The user's side: a HOME of their own with the CLI configured for the kit, as a user would do it."""
    tmp = home / ".tmp"  # the CLIs' scratch (Claude Code's cc-socks/) with the test's files, never in /tmp
    tmp.mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(home), "PATH": cli_path(), "TMPDIR": str(tmp)}
    for v in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "HTTPS_PROXY", "https_proxy"):
        env[v] = ""
    if preset == "claude":
        env.update(ANTHROPIC_BASE_URL=model.anthropic_url, ANTHROPIC_API_KEY="sk-ant-kit")
        (home / ".claude").mkdir(parents=True, exist_ok=True)
    else:
        cx = home / ".codex"
        cx.mkdir(parents=True, exist_ok=True)
        (cx / "config.toml").write_text(codex_config(model.openai_url))
        env.update(OPENAI_API_KEY="sk-kit")
    return env


def codex_config(base_url: str) -> str:
    # no retries: the kit's hang and dead-stream scripts must end the CLI, not start it over
    return (f'model = "gpt-5-codex"\nmodel_provider = "kit"\n\n[model_providers.kit]\nname = "kit"\n'
            f'base_url = "{base_url}"\nwire_api = "responses"\nenv_key = "OPENAI_API_KEY"\n'
            'request_max_retries = 0\nstream_max_retries = 0\n')


def policy(path: Path, preset: str, **loop) -> Path:
    base = {"max_iterations": 3, "iteration_timeout": "60s", "kill_grace": "1s", "spend_cap_usd": 50.0,
            "gates": [gate()],
            "agent": {"preset": preset, "model": CLAUDE_MODEL if preset == "claude" else None}}
    base.update(loop)
    path.write_text(yaml.safe_dump({"version": 1, "loop": base}, sort_keys=False))
    return path


def run_env(base: dict) -> dict:
    full = {k: v for k, v in os.environ.items() if k not in ("HEALER_ROOT", "HEALER_AGENT_ID", "HEALER_FAILPOINTS")}
    full.update(base)
    return {k: v for k, v in full.items() if v != ""}


@pytest.fixture(params=["claude", "codex"])
def preset(request) -> str:
    need_cli(request.param)
    return request.param


@pytest.fixture
def off_tmp():
    """A folder outside /tmp, removed afterwards: unsandboxed Codex refuses to set up its own sandbox's helper when
    its CODEX_HOME (here: in the run's folder) lies under /tmp ("Refusing to create helper binaries under
    temporary dir"), so its own workspace-write sandbox is tried where a user's worktree would be."""
    import tempfile

    tmp = Path(tempfile.gettempdir()).resolve()
    base = REPO.resolve() / ".venv" / "agents-tests"
    if base.is_relative_to(tmp):  # a checkout cloned under /tmp (CI's clean clone, `git clone . /tmp/x`)
        base = Path.home() / ".cache" / "healer-agents-tests"
    base.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(dir=base))
    yield d
    shutil.rmtree(d, ignore_errors=True)
    with contextlib.suppress(OSError):
        base.rmdir()  # only when no neighbour still uses it


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    return h
