"""Each endpoint's signing secret, and the signature every delivery carries.

The secret is never stored: it is ``HMAC-SHA256(operator key, "conclave.webhook.v1:<endpoint
id>:<version>")``, base64url, behind ``whsec_`` — so the API derives it once to show it (at
registration, at rotation) and a worker derives it again to sign, and the database holds
nothing that signs. A rotation bumps the version; the operator's key
(``CONCLAVE_WEBHOOK_SECRET_KEY``) changing changes every secret at once.

A delivery is signed as Stripe's are: ``v1 = hex(HMAC-SHA256(secret, "<t>." + body))`` over
the exact bytes sent, with ``t`` the Unix time of the attempt, in the header
``Conclave-Signature: t=<t>,v1=<hex>[,v1=<hex>]`` — one ``v1`` per secret that signs (two
while a rotated endpoint's previous secret is still honoured). A receiver accepts the request
when one ``v1`` matches its secret (compared in constant time) and ``t`` is recent: the
timestamp is inside the signature, so a replayed request is refused once it is old.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence

from storage.webhook_outbox import SECRET_PREFIX

_LABEL = "conclave.webhook.v1"


def endpoint_secret(key: bytes, endpoint_id: str, version: int) -> str:
    """The signing secret of ``endpoint_id`` at ``version``, derived from the operator's key."""
    mac = hmac.new(key, f"{_LABEL}:{endpoint_id}:{version}".encode(), hashlib.sha256).digest()
    return SECRET_PREFIX + base64.urlsafe_b64encode(mac).decode("ascii").rstrip("=")


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """``hex(HMAC-SHA256(secret, "<timestamp>." + body))``."""
    return hmac.new(secret.encode("utf-8"), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_header(timestamp: int, secrets: Sequence[str], body: bytes) -> str:
    """``t=<timestamp>,v1=<hex>`` with one ``v1`` per secret, the current one first."""
    return ",".join([f"t={timestamp}", *(f"v1={signature(s, timestamp, body)}" for s in secrets)])
