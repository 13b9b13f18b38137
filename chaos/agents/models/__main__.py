"""Serve one scripted model until interrupted:  python -m chaos.agents.models SCRIPT [--port N]

Prints the two base URLs (Claude Code: ANTHROPIC_BASE_URL; Codex: a model_provider's base_url with
wire_api = "responses") and the Codex provider block, then serves until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from chaos.agents.models.gameday import codex_config
from chaos.agents.models.scripts import NAMES
from chaos.agents.models.server import ModelServer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaos.agents.models", description=__doc__.splitlines()[0])
    ap.add_argument("script", choices=NAMES)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--outside", default="/tmp/healer-kit-outside", help="the path write_outside aims at")
    a = ap.parse_args(argv)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    with ModelServer(a.script, port=a.port, outside=a.outside) as m:
        print(f"ANTHROPIC_BASE_URL={m.anthropic_url}\nOPENAI_BASE_URL={m.openai_url}\n\n# ~/.codex/config.toml\n"
              f"{codex_config(m.openai_url)}", flush=True)
        done.wait()
        print(f"{len(m.requests)} request(s), {len(m.turns())} scripted", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
