"""What an upstream error may say, and to whom (issue 8 C).

A provider that answers non-2xx, or sends an error object inside a stream, says
things Conclave does not control: its body can quote the request, echo the key,
name internal hosts or carry text a plan's author planted. So an error has two
audiences:

* **readers of the plan** (the stored phase row, ``GET /v1/plans/{id}``, the
  event stream) get the error's stable ``code`` and a short reason made of safe
  parts only: the provider's name, the HTTP status, and the provider's error
  type or code when it looks like an identifier (:func:`safe_code`) —
  ``openai HTTP 401 (invalid_api_key)``. Never the body or the message text.
* **the worker's log** gets the body too (:func:`scrub`: the key and configured
  header values replaced, anything token-like replaced, control characters
  escaped, truncated), logged by the gateway with the plan and phase context.

``reason`` and ``scrub`` are the only ways an upstream answer becomes text here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_DETAIL = 1000  # characters of a scrubbed body kept for the log

# A provider error code or type worth showing: an identifier of letters and separators
# (invalid_api_key, rate_limit_error, context_length_exceeded, InvalidApiKey). No digits,
# no spaces, short: anything else could be a message, a value or a token.
_CODE = re.compile(r"^[A-Za-z][A-Za-z_.-]{1,47}$")
_LONG_RUN = 24  # an unseparated run of letters this long is not an identifier we show

_TOKEN_LIKE = (
    # "Bearer …", "Basic …"
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+"), r"\1 ***"),
    # key=value / "key": "value" for names that hold secrets
    (re.compile(r"(?i)((?:api[_-]?key|access[_-]?key|secret|token|password|passwd|authorization|"
                r"credential|session|signature)[\"']?\s*[:=]\s*[\"']?)[^\s\"',;}&]+"), r"\1***"),
    # JSON web tokens
    (re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), "***"),
    # prefixed keys: sk-…, pk_live_…, ghp_…, xoxb-…, AKIA…
    (re.compile(r"\b(?:sk|pk|rk|ak|ghp|gho|ghs|xox[abpr]|glpat)[-_][A-Za-z0-9_-]{6,}"), "***"),
    (re.compile(r"\bAKIA[A-Z0-9]{12,}\b"), "***"),
)
_RUN = re.compile(r"[A-Za-z0-9_+/=.-]{20,}")  # a long run of key alphabet: a token if it mixes letters and digits
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def safe_code(code: object) -> str | None:
    """``code`` if it is a provider error identifier that may be shown, else None."""
    if not isinstance(code, str) or not _CODE.fullmatch(code):
        return None
    if any(len(run) >= _LONG_RUN for run in re.split(r"[_.-]", code)):
        return None
    return code


def reason(provider: str, what: str, code: object = None) -> str:
    """The public reason of an upstream error: ``openai HTTP 401 (invalid_api_key)``."""
    shown = safe_code(code)
    return f"{provider} {what}" + (f" ({shown})" if shown else "")


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """An upstream body fit for the worker's log: the given secrets and anything
    token-like replaced by ``***``, control characters escaped, at most
    ``MAX_DETAIL`` characters."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    for pattern, replacement in _TOKEN_LIKE:
        text = pattern.sub(replacement, text)
    text = _RUN.sub(_token_run, text)
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)
    return text if len(text) <= MAX_DETAIL else text[:MAX_DETAIL] + "…"


def _token_run(match: re.Match[str]) -> str:
    run = match.group(0)
    mixed = any(c.isdigit() for c in run) and any(c.isalpha() for c in run)
    return "***" if mixed else run
