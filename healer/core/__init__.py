"""The pure core: `decide(snapshot, policy, memory) -> Decision` (README "Architecture", docs/supervisor-core.md).

No I/O and no clock: `snapshot.now` is the only time the core knows. Same input,
same output. See docs/supervisor-core.md for the contract with the shell.
"""

from healer.core.plan import decide, detect

__all__ = ["decide", "detect"]
