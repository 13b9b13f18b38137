"""sha1 and sha256 for `healer loop run`'s path: CPython's own implementations when present.

`hashlib` loads OpenSSL to offer its constructors, which costs more CPU at start-up than the loop's
hashing of small things (tree ids, state hashes, an index checksum) takes in CPython's built-in
modules. The same algorithms, so the same digests (tests/loop/test_digest.py checks a few); another
Python without these modules gets hashlib's.
"""

from __future__ import annotations

try:
    from _sha1 import sha1
except ImportError:  # pragma: no cover - not CPython
    from hashlib import sha1
try:
    from _sha256 import sha256  # CPython <= 3.11
except ImportError:  # pragma: no cover
    try:
        from _sha2 import sha256  # CPython >= 3.12
    except ImportError:
        from hashlib import sha256

__all__ = ["sha1", "sha256"]
