"""A real CLI that cannot start is one line and exit 69 before any iteration is burnt: a missing binary, a model
endpoint out of reach (dead, or the sandbox's network off), refused flags, config or credentials."""

from __future__ import annotations

import json
import shutil
import socket

import pytest

from chaos.agents.models.server import ModelServer
from healer.loop import agents
from tests.agents.conftest import agent_env, calc_repo, need_bwrap, need_cli, policy
from tests.agents.test_loop import loop
from tests.loop.conftest import events


def dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there any more: connection refused
    return port


def one_line_69(cp) -> str:
    assert cp.returncode == 69, cp.stdout + cp.stderr
    assert "Traceback" not in cp.stderr
    return cp.stdout + cp.stderr


@pytest.mark.parametrize("preset", ["claude", "codex"])
def test_a_missing_cli_is_69_before_any_iteration(tmp_path, preset):
    repo = calc_repo(tmp_path / "repo")
    home = tmp_path / "home"
    home.mkdir()
    with ModelServer("converge") as m:
        env = agent_env(preset, home, m)
        bindir = tmp_path / "bin"  # git and bwrap only: no CLI, wherever the machine installed one
        bindir.mkdir()
        for tool in ("git", "bwrap"):
            if shutil.which(tool):
                (bindir / tool).symlink_to(shutil.which(tool))
        env["PATH"] = str(bindir)
        cp = loop(repo, policy(tmp_path / "p.yaml", preset), env)
        assert m.turns() == []
    err = one_line_69(cp)
    assert f"'{preset}' command is not on PATH" in err


def test_a_dead_endpoint_is_69_before_any_iteration(tmp_path, preset, home):
    repo = calc_repo(tmp_path / "repo")
    with ModelServer("converge") as m:
        env = agent_env(preset, home, m)
    port = dead_port()
    if preset == "claude":
        env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{port}"
    else:
        cfg = home / ".codex" / "config.toml"
        cfg.write_text(cfg.read_text().replace(m.openai_url, f"http://127.0.0.1:{port}/v1"))
    cp = loop(repo, policy(tmp_path / "p.yaml", preset), env)
    err = one_line_69(cp)
    assert f"127.0.0.1:{port}" in err and "does not answer" in err
    assert not events(repo, "loop.iteration")


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_network_off_reaches_the_model_only_through_the_allow_list(tmp_path, preset, home):
    """Network off: the preset adds its model endpoint to loop.sandbox_network_allow (the network work of issue 31)
    and the run converges; a healer without that allow-list says so up front, exit 69, never silent retries."""
    from healer.policy.schema import Loop

    need_bwrap()
    repo = calc_repo(tmp_path / "repo")
    with ModelServer("converge") as m:
        cp = loop(repo, policy(tmp_path / "p.yaml", preset, sandbox_network=False), agent_env(preset, home, m))
        turns = m.turns()
    if "sandbox_network_allow" in Loop.model_fields:
        assert cp.returncode == 0, cp.stdout + cp.stderr
        assert turns
    else:
        err = one_line_69(cp)
        assert turns == []
        assert f"127.0.0.1:{m.port}" in err and "loop.sandbox_network_allow" in err


def test_refused_flags_or_config_is_69_not_stalled(tmp_path, preset, home):
    need_bwrap()
    repo = calc_repo(tmp_path / "repo")
    with ModelServer("converge") as m:
        env = agent_env(preset, home, m)
        loop_keys = {}
        if preset == "claude":
            loop_keys = {"agent": {"preset": "claude", "extra_args": ["--no-such-flag-xyz"]}}
        else:  # a config Codex refuses at start
            cfg = home / ".codex" / "config.toml"
            cfg.write_text(cfg.read_text() + "\n[model_providers.bad]\nname = 1\n")
        cp = loop(repo, policy(tmp_path / "p.yaml", preset, **loop_keys), env)
        assert m.turns() == []
    err = one_line_69(cp)
    assert f"{preset} did not start" in err
    assert ("no-such-flag-xyz" if preset == "claude" else "config.toml") in err
    assert [e.payload["preset"] for e in events(repo, "loop.agent_unavailable")] == [preset]


def test_claude_without_credentials_is_69(tmp_path, home):
    need_cli("claude")
    need_bwrap()
    repo = calc_repo(tmp_path / "repo")
    with ModelServer("converge") as m:
        env = agent_env("claude", home, m)
        env["ANTHROPIC_API_KEY"] = ""
        cp = loop(repo, policy(tmp_path / "p.yaml", "claude"), env)
    err = one_line_69(cp)
    assert "claude did not start" in err and "login" in err.lower()


# -- the pure parts -------------------------------------------------------------------------------------------

def test_endpoint_comes_from_the_setting_the_cli_reads():
    assert agents.endpoint("claude", {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8123"})[:2] == ("127.0.0.1", 8123)
    assert agents.endpoint("claude", {}) == ("api.anthropic.com", 443, agents.DEFAULT_WHERE)
    cfg = 'model_provider = "gw"\n[model_providers.gw]\nbase_url = "https://gw.example:8443/v1"\nwire_api = "responses"\n'
    assert agents.endpoint("codex", {"OPENAI_BASE_URL": "http://x:1"}, cfg)[:2] == ("gw.example", 8443)
    assert agents.endpoint("codex", {"OPENAI_BASE_URL": "http://x:1"}, "not toml [")[:2] == ("x", 1)
    assert agents.endpoint("codex", {})[:2] == ("api.openai.com", 443)


def test_start_failure_only_when_the_model_never_answered():
    ok = json.dumps({"type": "result", "is_error": True, "modelUsage": {"m": {}}, "result": "budget"})
    assert agents.start_failure("claude", 1, ok, "") is None  # it ran, then failed: the loop's business
    nologin = json.dumps({"type": "result", "is_error": True, "modelUsage": {}, "result": "Not logged in"})
    assert agents.start_failure("claude", 1, nologin, "") == "Not logged in"
    assert agents.start_failure("claude", 0, "", "") is None and agents.start_failure("command", 1, "", "x") is None
    turn = '{"type":"thread.started"}\n{"type":"item.completed","item":{"type":"agent_message","text":"hi"}}\n'
    assert agents.start_failure("codex", 1, turn, "") is None
    failed = '{"type":"thread.started"}\n{"type":"turn.failed","error":{"message":"401 Unauthorized"}}\n'
    assert agents.start_failure("codex", 1, failed, "") == "401 Unauthorized"
    assert agents.start_failure("codex", 1, "", "WARNING: proceeding, x\nError loading config.toml: bad\n") == \
        "Error loading config.toml: bad"


def test_the_endpoint_joins_the_allow_list_only_when_the_network_is_off():
    from healer.loop import agenthome
    from healer.policy.schema import Loop

    env = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8123"}
    on = Loop(sandbox_network=True)
    assert agenthome.allow_endpoint("claude", env, on, "bwrap") is on  # network on: nothing to add
    # null is off in every sandbox (issue 39): the default policy gets the endpoint by itself
    assert agenthome.network_off(False, None, "bwrap") and agenthome.network_off(None, None, "bwrap")
    assert agenthome.network_off(None, ["x:1"], "bwrap") and agenthome.network_off(None, None, "container")
    assert not agenthome.network_off(True, None, "bwrap")
    assert agenthome.allow_endpoint("claude", env, Loop(), "bwrap").sandbox_network_allow == ["127.0.0.1:8123"]
    assert not agenthome.network_off(False, None, "none")
    assert agenthome.host_port("::1", 8) == "[::1]:8"
    if "sandbox_network_allow" in Loop.model_fields:
        off = Loop(sandbox_network=False)
        assert agenthome.allow_endpoint("claude", env, off, "bwrap").sandbox_network_allow == ["127.0.0.1:8123"]
