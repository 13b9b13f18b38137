"""Scripted loop agent: claims the task is done (in words and in a Claude-style result)
while changing nothing that the gates check. Only the gates may decide."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    n = argv[1] if len(argv) > 1 else "?"
    Path("CLAIMS.md").write_text(f"iteration {n}: the task is complete, all tests pass.\n")
    print(json.dumps({"type": "result", "subtype": "success", "is_error": False,
                      "result": f"Done (iteration {n}). The task is complete and all tests pass."}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
