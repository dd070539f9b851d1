"""Signing in from a browser: the form at ``/ui/login``, what it posts, and where the
browser goes afterwards.

The user pastes a token (``conclave tokens create``, or ``CONCLAVE_API_TOKEN``); the
server checks it and answers with a session cookie (:mod:`orchestrator.api.session`).
The token itself never comes back: not in the page, a URL or a log. ``next`` (where to
go after signing in) is only ever a path of this UI, so the form is no open redirect.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs

from markupsafe import Markup

from orchestrator.api.ui.html import page
from orchestrator.core.errors import InvalidRequest

MAX_FORM = 4096
_NEXT = re.compile(r"^/ui/(?:plans/[A-Za-z0-9_.:\-]{1,200}|evals/[a-z0-9][a-z0-9_-]{0,58})?"
                   r"(?:\?cursor=[A-Za-z0-9_\-%=]{1,300})?$")
HOME = "/ui/"


def safe_next(value: str | None) -> str:
    """``value`` if it is a page of this UI, else the plan list."""
    return value if value and _NEXT.fullmatch(value) else HOME


def parse_form(body: bytes) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body of a few fields; each field once."""
    try:
        text = body.decode("utf-8")
        fields = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text), max_num_fields=8)
    except (UnicodeDecodeError, ValueError):
        raise InvalidRequest("the form could not be read", details=[{"field": "body", "message": "not a form"}]
                             ) from None
    for name, values in fields.items():
        if len(values) != 1:
            raise InvalidRequest(f"{name}: given more than once", details=[{"field": name, "message": "repeated"}])
    return {name: values[0] for name, values in fields.items()}


def login_page(*, next_path: str, problem: str | None = None, session_hours: float) -> str:
    error = Markup('<p class="error" role="alert">{}</p>').format(problem) if problem else Markup("")
    body = Markup(
        '<section class="login"><h1>Sign in</h1>{error}'
        '<form method="post" action="/ui/login">'
        '<label for="token">API token</label>'
        '<input id="token" name="token" type="password" autocomplete="off" spellcheck="false" required '
        'placeholder="conclave_…">'
        '<input type="hidden" name="next" value="{next}">'
        '<button type="submit">Sign in</button></form>'
        '<p class="hint">Paste a token from <code>conclave tokens create</code> (it needs the '
        '<code>plans:read</code> scope). The browser keeps a session for {hours} hours, never the token; '
        'it reads plans, acts only through the page\'s own forms (with <code>plans:write</code>), and ends at '
        'once when the token is revoked.</p></section>'
    ).format(error=error, next=next_path, hours=f"{session_hours:g}")
    return page("Sign in", body, viewer=None, auth=True)
