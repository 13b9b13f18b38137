"""The real CLIs' side of a loop run (shell of healer/loop/agents.py): the run's own config home, and the
checks that make a CLI that cannot start one line and exit 69.

The config home (`<run folder>/claude-home` or `codex-home`) is what CLAUDE_CONFIG_DIR / CODEX_HOME point
at. It is writable inside the sandbox (the CLIs write session files there at every start; Claude's Bash
tool fails with EROFS otherwise) and made afresh before EVERY iteration from the user's credentials and
settings: the last iteration's home moves into that iteration's folder (evidence, never deleted), so a hook
the agent planted in settings.json runs at most in its own, sandboxed, iteration, and never in the user's
next session (the user's real home is only ever read).
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
from collections.abc import Mapping
from pathlib import Path

from healer import endpoints
from healer.errors import InvalidInput, Unavailable
from healer.loop import agents

PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy")


class AgentUnavailable(Unavailable):
    """The CLI cannot start or cannot reach its model: exit 69, one line naming the cause."""


class ModelUnavailable(AgentUnavailable):
    """The CLI started but its model endpoint only ever answered 5xx / 429 / connection errors (its stream says so,
    usage.Meter.endpoint_down) and nothing changed: the iteration is discarded, the run ends with 69, kept for a
    resume; the fleet counts the attempt against no budget (healer/core/endings.py MODEL_UNAVAILABLE)."""


def home(preset: str, run_dir: Path) -> Path | None:
    return run_dir / f"{preset}-home" if preset in agents.CLI_PRESETS else None


def seed(preset: str, dest: Path, env: Mapping[str, str], previous: Path | None = None) -> dict[str, str]:
    """Make `dest` a fresh config home for the next iteration; the environment that says so. What the last
    iteration left there (its session files, anything the agent planted: a hook, an AGENTS.md or CLAUDE.md the
    CLI would read as instructions) is moved into `previous` (that iteration's folder), never deleted."""
    if dest.exists() and previous is not None and (dest.is_symlink() or not dest.is_dir() or any(dest.iterdir())):
        previous.mkdir(parents=True, exist_ok=True)
        target = previous / dest.name
        k = 1
        while target.exists() or target.is_symlink():
            target, k = previous / f"{dest.name}.{k}", k + 1
        dest.rename(target)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        names = os.listdir(agents.user_home(preset, env))
    except OSError:
        names = []
    fixed = agents.seeds(preset, env)
    for src, name in fixed + [m for m in agents.more_seeds(preset, env, names) if _small_file(m[0])]:
        if os.path.isfile(src):
            tmp = dest / f".{name}.seed"
            shutil.copyfile(src, tmp)
            os.chmod(tmp, 0o600)
            os.replace(tmp, dest / name)
    return {agents.HOME_VAR[preset]: str(dest), **agents.offline_env(preset)}


def _small_file(path: str) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size <= agents.SEED_MAX


def codex_config(env: Mapping[str, str]) -> str:
    try:
        return (Path(agents.user_home("codex", env)) / "config.toml").read_text()
    except (OSError, UnicodeDecodeError):
        return ""


def endpoint_of(preset: str, env: Mapping[str, str]) -> tuple[str, int, str]:
    return agents.endpoint(preset, env, codex_config(env) if preset == "codex" else "")


def host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def network_off(network: bool | None, allow: list[str] | None, sandbox_mode: str) -> bool:
    """The sandbox's network is off: explicitly or by default (null, every sandbox: sandbox.network_on), but for
    the allow-list (healer/netbox.py)."""
    if sandbox_mode == "none":
        return False
    return not network


def allow_endpoint(preset: str, env: Mapping[str, str], loop, sandbox_mode: str):
    """The loop policy with the CLI's model endpoint added to `loop.sandbox_network_allow` when the sandbox's
    network is off under bwrap: the model and nothing else is reachable. Unchanged otherwise (network on, no
    sandbox, or a healer without the allow-list: preflight then says why the CLI cannot reach its model)."""
    allow = getattr(loop, "sandbox_network_allow", None)
    if allow is None or sandbox_mode != "bwrap" or not network_off(loop.sandbox_network, allow, sandbox_mode):
        return loop
    host, port, _ = endpoint_of(preset, env)
    hp = host_port(host, port)
    if hp in allow:
        return loop
    try:  # an entry the allow-list cannot take (a non-loopback address) is not added: preflight says why
        endpoints.parse_endpoint(hp)
    except InvalidInput:
        return loop
    return loop.model_copy(update={"sandbox_network_allow": [*allow, hp]})


def preflight(preset: str, env: Mapping[str, str], sandbox_mode: str, network: bool | None,
              allow: list[str] | None, timeout: float = 3.0) -> tuple[str, int]:
    """Before the first iteration: the CLI's model endpoint must be reachable from where the agent runs (a sandbox
    without network cannot reach it unless allow-listed; a set endpoint must accept a TCP connection). Returns
    (host, port); raises AgentUnavailable with the cause."""
    host, port, where = endpoint_of(preset, env)
    hp = host_port(host, port)
    if network_off(network, allow, sandbox_mode) and hp not in (allow or []):
        raise AgentUnavailable(f"{preset}: its model endpoint {hp} ({where}) is unreachable with loop.sandbox_network "
                               f"off: add {hp} to loop.sandbox_network_allow or turn the network on")
    if any(env.get(v) for v in PROXY_VARS) or where == agents.DEFAULT_WHERE:
        # through a proxy the proxy decides; the vendor's own API host is not probed from here (no DNS or TLS
        # traffic of healer's own): only an endpoint the user set (a gateway, a local model) is knocked on
        return host, port
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise AgentUnavailable(f"{preset}: its model endpoint {hp} ({where}) does not answer: {why}") from None
    return host, port


def inside_env(preset: str, env: Mapping[str, str], loop, sandbox_mode: str) -> dict[str, str]:
    """The base-URL variable as the CLI must use it inside a sandbox whose network is off but for its allow-list:
    an endpoint on a port below 1024 answers there on port + 10000 (healer/netbox.py), so the CLI is given
    that URL (TLS checks the name, not the port). Empty when nothing moves."""
    allow = getattr(loop, "sandbox_network_allow", None)
    if sandbox_mode != "bwrap" or not network_off(loop.sandbox_network, allow, sandbox_mode):
        return {}
    var, default = agents.DEFAULT_API[preset]
    url = env.get(var) or default
    if preset == "codex" and not env.get(var) and codex_config(env):
        return {}  # a provider's base_url in config.toml is the user's to point at the inside port
    try:
        inside = endpoints.inside_url(url)
    except InvalidInput:
        return {}
    return {var: inside} if inside != url else {}


def missing(preset: str, exe: str) -> AgentUnavailable:
    return AgentUnavailable(f"{preset}: the {exe!r} command is not on PATH (install it: docs/agents.md)")
