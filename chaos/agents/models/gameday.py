"""The scripted model of a real-mode game day (`real: {model: SCRIPT}` in a scenario): served on 127.0.0.1 for the
run, with the "user's" config of both CLIs in the game-day folder pointing at it. The claude and codex presets seed
each run's config home from there (CLAUDE_CONFIG_DIR / CODEX_HOME name it), so nothing of the operator's own
~/.claude or ~/.codex is read, and the game day needs no network beyond 127.0.0.1."""

from __future__ import annotations

import os
from pathlib import Path

from chaos.agents.models.server import ModelServer

CLI_BIN = Path(__file__).resolve().parents[3] / ".venv" / "agents-cli" / "bin"  # `make agents-cli`


def codex_config(base_url: str) -> str:
    # no retries: a dead stream must end the CLI at healer's deadline, not start it over
    return (f'model = "gpt-5-codex"\nmodel_provider = "kit"\n\n[model_providers.kit]\nname = "kit"\n'
            f'base_url = "{base_url}"\nwire_api = "responses"\nenv_key = "OPENAI_API_KEY"\n'
            'request_max_retries = 0\nstream_max_retries = 0\n')


def start(folder: Path, script: str, **params) -> tuple[ModelServer, dict[str, str]]:
    """The server (stop it at the end) and the environment the fleet's processes need to use it."""
    m = ModelServer(script, **params).start()
    claude, codex = folder / "user-claude", folder / "user-codex"
    claude.mkdir(parents=True, exist_ok=True)
    codex.mkdir(parents=True, exist_ok=True)
    (codex / "config.toml").write_text(codex_config(m.openai_url))
    path = os.environ.get("PATH", "")
    if (CLI_BIN / "claude").exists() or (CLI_BIN / "codex").exists():
        path = f"{CLI_BIN}{os.pathsep}{path}"
    return m, {"ANTHROPIC_BASE_URL": m.anthropic_url, "ANTHROPIC_API_KEY": "sk-ant-kit", "OPENAI_API_KEY": "sk-kit",
               "CLAUDE_CONFIG_DIR": str(claude), "CODEX_HOME": str(codex), "PATH": path}
