"""Images without a registry: build what the fleet needs locally, offline.

Nothing can be pulled here, so `healer-python` is an imported root file system that
holds no files at all: empty mount points (`usr tmp etc proc dev sys`) and the
merged-usr symlinks (`bin lib lib64 sbin -> usr/...`). A container gets its programs
from the host by read-only bind mounts at the same paths (`python_mounts()`): `/usr`,
the interpreter's prefix (pyenv, a venv), site-packages and the source tree of an
editable install. Same paths inside and out, so `sys.executable`, shebangs, `.pth`
files and git worktree pointers all keep working.

`python -m healer.containers.images` (`make images`) builds it idempotently: the image is
labelled with a hash of its content and rebuilt only when that changes.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import site
import sys
import tarfile
from pathlib import Path

import docker.errors

import healer
from healer.containers.client import connect
from healer.errors import HealerError, UsageError

DEFAULT_IMAGE = "healer-python"
HASH_LABEL = "healer.image.hash"

_DIRS = ("usr", "tmp", "etc", "proc", "dev", "sys", "run")
_MERGED = ("bin", "lib", "lib64", "sbin", "lib32", "libx32")


def _layout() -> tuple[list[str], dict[str, str]]:
    """Empty directories and symlinks of the root, mirroring the host's merged-usr links."""
    dirs = list(_DIRS)
    links: dict[str, str] = {}
    for name in _MERGED:
        host = Path("/") / name
        if host.is_symlink():
            links[name] = os.readlink(host).lstrip("/")
        elif host.is_dir():
            dirs.append(name)  # not merged-usr: python_mounts() bind-mounts it instead
    return sorted(dirs), dict(sorted(links.items()))


def root_tar() -> bytes:
    dirs, links = _layout()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d == "tmp" else 0o755
            info.mtime = 0
            tar.addfile(info)
        for name, target in links.items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            info.mode = 0o777
            info.mtime = 0
            tar.addfile(info)
    return buf.getvalue()


def content_hash() -> str:
    return hashlib.sha256(root_tar()).hexdigest()[:16]


def python_mounts() -> dict[str, dict[str, str]]:
    """Read-only bind mounts (docker SDK `volumes=` shape) that let the host's Python and
    healer run inside the empty image, at the same paths as on the host."""
    want: set[str] = {"/usr"}
    for name in _MERGED:
        p = Path("/") / name
        if p.is_dir() and not p.is_symlink():
            want.add(str(p))
    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))),
                  *site.getsitepackages()]

    candidates.append(str(Path(healer.__file__).resolve().parents[1]))  # editable install: the source tree
    for c in candidates:
        for d in {c, os.path.realpath(c)}:
            if d and os.path.isdir(d):
                want.add(os.path.normpath(d))
    # keep only the outermost paths: a nested mount of the same source adds nothing
    kept: list[str] = []
    for d in sorted(want, key=len):
        if not any(d == k or d.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(d)
    return {p: {"bind": p, "mode": "ro"} for p in sorted(kept)}


def python_path_env() -> dict[str, str]:
    """PATH for a container that uses `python_mounts()`: the venv first, like on the host."""
    bins = [os.path.join(sys.prefix, "bin"), os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]
    seen: list[str] = []
    for b in bins:
        if b not in seen:
            seen.append(b)
    return {"PATH": ":".join(seen), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


def find(client, name: str = DEFAULT_IMAGE):
    try:
        return client.images.get(name)
    except docker.errors.ImageNotFound:
        return None


def build(client=None, name: str = DEFAULT_IMAGE, force: bool = False) -> tuple[str, str]:
    """Build `name` unless an image with the same content hash exists. Returns (what, image id)."""
    client = client or docker.from_env()
    digest = content_hash()
    have = find(client, name)
    if have is not None and not force and (have.labels or {}).get(HASH_LABEL) == digest:
        return "up to date", have.id
    repo, _, tag = name.partition(":")
    client.api.import_image_from_data(root_tar(), repository=repo, tag=tag or "latest",
                                      changes=[f"LABEL {HASH_LABEL}={digest}", "LABEL healer.image=python"])
    img = client.images.get(name)
    return ("rebuilt" if have is not None else "built"), img.id


def ensure(client, name: str = DEFAULT_IMAGE) -> None:
    """Build the project's own image on demand; another missing image is the operator's to provide."""
    if find(client, name) is not None:
        return
    if name.partition(":")[0] != DEFAULT_IMAGE:
        raise UsageError(f"docker image {name!r} not found and cannot be pulled here; build it locally (make images builds {DEFAULT_IMAGE})")
    build(client, name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m healer.containers.images", description="Build the images healer needs, offline.")
    ap.add_argument("--force", action="store_true", help="rebuild even when up to date")
    ap.add_argument("--name", default=DEFAULT_IMAGE)
    args = ap.parse_args(argv)

    try:
        client = connect()
    except HealerError as e:
        sys.stderr.write(f"images: {e}\n")
        return e.exit_code
    what, image_id = build(client, args.name, force=args.force)
    print(f"{args.name}: {what} ({image_id[:19]}, empty root + host mounts: {', '.join(python_mounts())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
