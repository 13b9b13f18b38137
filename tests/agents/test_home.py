"""The run's config home (healer/loop/agenthome.py): seeded from the user's settings and credentials, afresh
each iteration, the previous one kept as evidence; the user's own home only read."""

from __future__ import annotations

from types import SimpleNamespace as NS

from healer.loop import agenthome


def test_seeded_with_settings_never_history_or_sessions(tmp_path):
    user = tmp_path / "codex-user"
    (user / "sessions").mkdir(parents=True)
    files = {"config.toml": "model = 'x'\n", "auth.json": "{}", "kit.config.toml": "model = 'k'\n",
             "AGENTS.md": "be nice\n", "history.jsonl": "{}\n", "log.txt": "x"}
    for n, t in files.items():
        (user / n).write_text(t)
    (user / "big.json").write_bytes(b" " * (2 << 20))
    before = {p.name: p.read_bytes() for p in user.iterdir() if p.is_file()}
    run = tmp_path / "run" / "codex-home"
    env = agenthome.seed("codex", run, {"CODEX_HOME": str(user)}, tmp_path / "run" / "iter-000")
    assert env["CODEX_HOME"] == str(run)
    assert sorted(p.name for p in run.iterdir()) == ["AGENTS.md", "auth.json", "config.toml", "kit.config.toml"]
    (run / "settings.json").write_text("planted")
    agenthome.seed("codex", run, {"CODEX_HOME": str(user)}, tmp_path / "run" / "iter-001")
    assert not (run / "settings.json").exists()
    assert (tmp_path / "run" / "iter-001" / "codex-home" / "settings.json").read_text() == "planted"  # kept
    assert {p.name: p.read_bytes() for p in user.iterdir() if p.is_file()} == before  # only read


def test_claude_global_config_comes_from_beside_its_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude.json").write_text('{"oauthAccount": {}}')
    (home / ".claude" / "settings.json").write_text("{}")
    (home / ".claude" / "CLAUDE.md").write_text("memory\n")
    monkeypatch.setenv("HOME", str(home))
    run = tmp_path / "claude-home"
    env = agenthome.seed("claude", run, {})
    assert env["CLAUDE_CONFIG_DIR"] == str(run) and env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert sorted(p.name for p in run.iterdir()) == [".claude.json", "CLAUDE.md", "settings.json"]

def test_inside_env_moves_a_low_port_only_with_network_off():
    off = NS(sandbox_network=None, sandbox_network_allow=["api.anthropic.com:443"])
    assert agenthome.inside_env("claude", {}, off, "bwrap") == {"ANTHROPIC_BASE_URL": "https://api.anthropic.com:10443"}
    assert agenthome.inside_env("claude", {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8080"}, off, "bwrap") == {}
    on = NS(sandbox_network=True, sandbox_network_allow=[])
    assert agenthome.inside_env("claude", {}, on, "bwrap") == {}
    assert agenthome.inside_env("claude", {}, off, "none") == {}
