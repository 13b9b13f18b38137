"""Endpoints a sandboxed program may reach with its network off (`loop.sandbox_network_allow`, an agent CLI's base
URL): parsed and placed, pure. What listens for them and relays is healer/netbox.py; the policy checks its entries
with `parse_allow` without importing any socket code."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit, urlunsplit

from healer.errors import InvalidInput

LOW_PORT_SHIFT = 10000  # a port < 1024 answers inside on port + 10000


def parse_endpoint(entry: str, where: str = "loop.sandbox_network_allow") -> tuple[str, int]:
    """'host:port' or '[v6]:port' -> (host, port). A host is a name or a loopback address: another IP
    literal could not be given inside the sandbox's namespace (it has no route but its loopback)."""
    text = entry.strip()
    host, sep, port_s = text.rpartition(":")
    if not sep or not host or not port_s.isdigit() or not 0 < int(port_s) < 65536:
        raise InvalidInput(f"{where}: {entry!r}: expected host:port (port 1-65535)")
    if host.startswith("["):
        if not host.endswith("]"):
            raise InvalidInput(f"{where}: {entry!r}: expected [address]:port")
        host = host[1:-1]
    host = host.lower()
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
        if not all(p and len(p) < 64 and p.replace("-", "").replace("_", "").isalnum() for p in host.split(".")):
            raise InvalidInput(f"{where}: {entry!r}: not a host name") from None
    if ip is not None and not ip.is_loopback:
        raise InvalidInput(f"{where}: {entry!r}: only loopback addresses can be given inside the sandbox; "
                           "name the host by a host name instead")
    return host, int(port_s)


def parse_allow(entries: list[str] | None, where: str = "loop.sandbox_network_allow") -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for e in entries or []:
        ep = parse_endpoint(e, where)
        if ep not in out:
            out.append(ep)
    inside = [listen_addresses(out)[ep] for ep in out]
    for ep, addr in zip(out, inside, strict=True):
        if inside.count(addr) > 1:
            raise InvalidInput(f"{where}: {ep[0]}:{ep[1]} answers inside on {addr[0]}:{addr[1]} like another entry")
    return out


def inside_port(port: int) -> int:
    return port + LOW_PORT_SHIFT if port < 1024 else port


def endpoint_of(url: str, where: str = "base URL") -> tuple[str, int]:
    """The host:port a base URL connects to (https 443, http 80 when it names none)."""
    u = urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise InvalidInput(f"{where}: {url!r}: expected an http(s) URL")
    try:
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        raise InvalidInput(f"{where}: {url!r}: bad port") from None
    return parse_endpoint(f"[{u.hostname}]:{port}" if ":" in u.hostname else f"{u.hostname}:{port}", where)


def inside_url(url: str) -> str:
    """The URL as a program inside the sandbox must use it (the port moved when below 1024)."""
    host, port = endpoint_of(url)
    if inside_port(port) == port:
        return url
    u = urlsplit(url)
    user_host = u.netloc.rsplit("@", 1)
    name = f"[{host}]" if ":" in host else u.hostname
    hostport = f"{name}:{inside_port(port)}"
    netloc = f"{user_host[0]}@{hostport}" if len(user_host) == 2 else hostport
    return urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))


def listen_addresses(allow: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[str, int]]:
    """Where each endpoint answers inside: a loopback address as given ('localhost' as 127.0.0.1), each
    host name on a loopback alias of its own (127.0.0.2, .3, ... in the order listed)."""
    aliases: dict[str, str] = {}
    out = {}
    for host, port in allow:
        try:
            addr = str(ipaddress.ip_address(host))
        except ValueError:
            if host == "localhost":
                addr = "127.0.0.1"
            else:
                addr = aliases.setdefault(host, f"127.0.0.{len(aliases) + 2}")
        out[(host, port)] = (addr, inside_port(port))
    return out
