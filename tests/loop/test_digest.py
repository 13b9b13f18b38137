"""healer/digest.py gives CPython's own sha1/sha256 on the loop's path: the same digests as hashlib's."""

from __future__ import annotations

import hashlib

from healer import digest


def test_digest_is_hashlib_s():
    for data in (b"", b"abc", bytes(range(256)) * 500):
        assert digest.sha1(data).hexdigest() == hashlib.sha1(data).hexdigest()
        assert digest.sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
        h = digest.sha1(b"blob %d\0" % len(data))
        h.update(data)
        assert h.digest() == hashlib.sha1(b"blob %d\0" % len(data) + data).digest()
