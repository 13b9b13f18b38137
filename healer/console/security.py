"""The console's security model (docs/console.md "Security"):

- bound to loopback by default; any other address only with a token (`--token` / $HEALER_CONSOLE_TOKEN), else refused
  before anything listens (exit 64);
- with a token, every request carries it (`Authorization: Bearer`, or the HttpOnly cookie `/login` sets);
- every POST carries the CSRF token of its page (a hidden field) equal to the `healer_csrf` cookie (double submit,
  SameSite=Strict), and an Origin, when sent, naming this console; else 403;
- `--read-only`: every POST is 403, no form is drawn;
- every page: a strict Content-Security-Policy (scripts and styles from the console only, no inline code, no frames),
  nosniff, no referrer to another site (same-origin: a form POST keeps its Origin); every value escaped (render.py).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from healer.errors import UsageError

CSRF_COOKIE = "healer_csrf"
TOKEN_COOKIE = "healer_token"
TOKEN_ENV = "HEALER_CONSOLE_TOKEN"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; "
       "base-uri 'none'; frame-ancestors 'none'")
# a game day's own HTML report: its inline styles and SVG, no script, in a sandbox of its own origin
REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; sandbox"
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin",
           "X-Frame-Options": "DENY", "Cache-Control": "no-store"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")
_HOLDER = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,31})=(.+)$", re.S)


@dataclass(frozen=True)
class Access:
    token: str | None  # None: none asked (loopback only)
    operator: str  # the actor of every steer: operator:<name>
    read_only: bool = False

    @property
    def actor(self) -> str:
        return f"operator:{self.operator}"


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def operator_name(given: str | None, env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    for cand in (given, env.get("USER"), env.get("LOGNAME")):
        if cand and _NAME.match(cand):
            return cand
    if given:
        raise UsageError(f"--operator {given!r}: expected letters, digits, '.', '_' or '-' (at most 32)")
    return "operator"


def access(host: str, token: str | None, operator: str | None, read_only: bool,
           env: Mapping[str, str] | None = None) -> Access:
    """What the console enforces, or the one-line refusal (64): a non-loopback bind without a token.
    A token `NAME=SECRET` names its holder, the operator its steers are recorded under."""
    env = os.environ if env is None else env
    token = token if token is not None else (env.get(TOKEN_ENV) or None)
    if token is not None and not token.strip():
        raise UsageError("--token: empty; give a secret (or leave it out to stay on 127.0.0.1)")
    if not is_loopback(host) and not token:
        raise UsageError(f"console: --host {host} is not loopback: refused without a token (--token or ${TOKEN_ENV})")
    m = _HOLDER.match(token or "")
    name = m.group(1) if m else operator_name(operator, env)  # the token's holder, else --operator, else $USER
    return Access(token, name, read_only)


def new_csrf() -> str:
    return secrets.token_urlsafe(32)


def same(a: str | None, b: str | None) -> bool:
    return bool(a) and bool(b) and hmac.compare_digest(str(a).encode(), str(b).encode())


def bearer(header: str | None) -> str | None:
    if header and header[:7].lower() == "bearer ":
        return header[7:].strip()
    return None
