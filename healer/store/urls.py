"""A store URL made safe to print: used by the PostgreSQL adapter, the outage reports and the CLI.

Its own module (not postgres.py) so that `healer.store.outage` can label a store without importing the adapter
that imports it (tests/spine/test_import_cycles.py)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redact(url: str) -> str:
    """The URL with any password replaced: safe to print or log."""
    try:
        u = urlsplit(url)
    except ValueError:
        return "postgresql://(unparsable url)"
    if u.password is None:
        return url
    host = u.hostname or ""
    if u.port:
        host += f":{u.port}"
    return urlunsplit((u.scheme, f"{u.username}:***@{host}", u.path, u.query, u.fragment))
