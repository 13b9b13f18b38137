"""Files written whole or not at all: the new text goes to a temp file beside the target and is renamed over
it, so a crash or a full disk mid-write leaves the old file as it was (and no half copy: a write that fails
removes its own temp file)."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, data: str | bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
