"""The governed loop (SPEC §5): one agent, one task, one working tree, until the gates pass.

decide.py is the pure part (history + policy -> continue or exit code + reason);
runner.py is the shell (processes, git, files); gitops.py, agents.py, state.py help it.
"""

from healer.loop.runner import LoopRequest, Outcome, run_loop

__all__ = ["LoopRequest", "Outcome", "run_loop"]
