"""The browser session cookie: how the plan page authenticates where a browser cannot
send ``Authorization`` (an ``EventSource`` never can).

A user signs in at ``/ui/login`` by pasting a token; the API checks it and sets
``conclave_session`` = ``v1.<principal id>.<expires>.<mac>``, where the MAC is
:func:`storage.identity.session_mac` of the principal id and the expiry, keyed by the
SHA-256 the database keeps of that token. So the cookie

- is not the token: it cannot be replayed as a bearer token, and a stolen cookie is
  worth at most a session;
- dies with its token (revoked, or a changed ``CONCLAVE_API_TOKEN``) and at its expiry
  (``CONCLAVE_UI_SESSION_HOURS``), checked on every request;
- needs no secret shared by the API processes (whoever can read the hash can read the
  plans anyway, and a session reads no more than that);
- is sent ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's page
  sends it), ``Secure`` when the request came over https, ``Path=/`` (the page's
  ``EventSource`` and fetches go to ``/v1``);
- authenticates only safe requests (GET, HEAD: :data:`SAFE_METHODS`), so it can never
  submit, patch, resume or cancel — a mutating route still needs ``Authorization``. The plan
  page's forms (answer, approve, send back, steer, cancel, resume) post to ``/ui`` with the
  session's form token (:func:`form_token`) as well, which only a page this API rendered for
  that session holds: the cookie alone authorizes no change (``orchestrator.api.ui.actions``).

This module is the format only; :class:`orchestrator.api.auth.Credentials` checks a
cookie against the database.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from dataclasses import dataclass

from starlette.requests import cookie_parser
from starlette.types import Scope

COOKIE = "conclave_session"
SAFE_METHODS = frozenset({"GET", "HEAD"})
VERSION = "v1"
MAX_VALUE = 256  # a longer cookie value is not one this module made

_VALUE = re.compile(r"^v1\.([0-9a-f]{16}|api-token)\.([0-9]{1,12})\.([0-9a-f]{64})$")


@dataclass(frozen=True)
class Claim:
    """What a session cookie says: whose session, until when, and its MAC."""

    principal_id: str
    expires: int  # Unix seconds
    mac: str

    @property
    def message(self) -> str:
        return message(self.principal_id, self.expires)

    def expired(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) >= self.expires


def message(principal_id: str, expires: int) -> str:
    """What the MAC covers (the version, the principal, the expiry)."""
    return f"conclave-session:{VERSION}:{principal_id}:{expires}"


def encode(principal_id: str, expires: int, mac: str) -> str:
    return f"{VERSION}.{principal_id}.{expires}.{mac}"


def decode(value: str) -> Claim | None:
    """The claim in a cookie value, or None for anything this module did not make."""
    if len(value) > MAX_VALUE:
        return None
    m = _VALUE.fullmatch(value)
    if m is None:
        return None
    return Claim(m.group(1), int(m.group(2)), m.group(3))


def read(scope: Scope) -> str | None:
    """The session cookie of a request, or None."""
    header = b"; ".join(v for k, v in scope.get("headers", []) if k.lower() == b"cookie")
    if not header:
        return None
    try:
        return cookie_parser(header.decode("latin-1")).get(COOKIE)
    except ValueError:
        return None


def set_cookie(value: str, *, max_age: int, secure: bool) -> str:
    """The ``Set-Cookie`` header value that opens a session."""
    return f"{COOKIE}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")


def clear_cookie(*, secure: bool) -> str:
    """The ``Set-Cookie`` header value that ends one (the browser drops the cookie)."""
    return f"{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")


def form_token(claim: Claim) -> str:
    """The session's form token (its CSRF token): an HMAC of the session's claim keyed by the
    session's own MAC. The page renders it into its forms; a form post must carry it beside the
    cookie. Another site's page can neither read the cookie (``HttpOnly``) nor the page that
    holds the token (the same-origin policy), so it cannot forge one; it dies with the session."""
    return hmac.new(claim.mac.encode("ascii"), f"conclave-form:{VERSION}:{claim.message}".encode(),
                    hashlib.sha256).hexdigest()


def form_token_matches(claim: Claim, given: str | None) -> bool:
    """``given`` is this session's form token (compared in constant time)."""
    return bool(given) and hmac.compare_digest(form_token(claim), str(given))
