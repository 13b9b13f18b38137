"""The governed loop (docs/loop.md): one agent, one task, one working tree, until the gates pass.

decide.py is the pure part (history + policy -> continue or exit code + reason);
runner.py and iteration.py are the shell (processes, git, files); docs/loop.md "Where the code is" maps the rest.
"""

from healer.loop.runner import LoopRequest, Outcome, run_loop

__all__ = ["LoopRequest", "Outcome", "run_loop"]
