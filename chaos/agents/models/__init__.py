"""A scripted model kit for the real Claude Code and Codex CLIs (issue 32): see server.py and scripts.py,
and env.py for the configuration each CLI needs to talk to it offline."""
