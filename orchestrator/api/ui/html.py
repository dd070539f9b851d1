"""The pages' HTML: the shell every page shares, the error page, and small formatters.

Everything is built with :class:`markupsafe.Markup`: a value formatted into markup is
escaped unless it is markup already, so a plan's title, an expert's name or a model's
words can never become tags or attributes. No template engine, no inline script or
style (the responses' Content-Security-Policy forbids both: :data:`SECURITY_HEADERS`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from markupsafe import Markup

from orchestrator.core.version import __version__
from storage.identity import Principal

STATIC = "/ui/static"

#: Sent with every page: nothing but our own files runs, nothing frames the page,
#: no URL (with a plan id) leaves the site in a Referer, nothing is cached.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def join(parts: Iterable[Markup | str], sep: str = "") -> Markup:
    return Markup(sep).join(parts)


def page(title: str, body: Markup, *, viewer: Principal | None, auth: bool, script: str | None = None) -> str:
    """A whole page: the header (who is signed in, sign out) around ``body``, and the one
    script of ours it runs (``script``: a file in ``static/``), if any."""
    if not auth:
        who = Markup('<span class="who">authentication off</span>')
    elif viewer is not None:
        who = Markup('<span class="who" title="tenant {tenant}">{name} · {tenant}</span>'
                     '<form method="post" action="/ui/logout" class="logout">'
                     '<button type="submit">Sign out</button></form>').format(name=viewer.name, tenant=viewer.tenant)
    else:
        who = Markup("")
    tail = Markup('<script src="{static}/{script}?v={v}" defer></script>').format(
        static=STATIC, script=script, v=__version__) if script else Markup("")
    return str(Markup(
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<title>{title} · Conclave</title><link rel="icon" href="data:,">'
        '<link rel="stylesheet" href="{static}/style.css?v={v}"></head>'
        '<body><header class="top"><a class="brand" href="/ui/">Conclave</a><nav>{who}</nav></header>'
        '<main>{body}</main>{tail}</body></html>\n'
    ).format(title=title, static=STATIC, v=__version__, who=who, body=body, tail=tail))


def error_page(status: int, title: str, message: str, *, viewer: Principal | None, auth: bool,
               code: str | None = None, back: str | None = None) -> str:
    """A page that says what went wrong in words, with the API's stable error code (``back``:
    the page to return to, e.g. the plan a form was posted from)."""
    link = Markup('<a href="{}">Back to the plan</a> · ').format(back) if back else Markup("")
    body = Markup('<section class="error-page"><h1>{title}</h1><p>{message}</p>{code}'
                  '<p>{link}<a href="/ui/">Your plans</a></p></section>').format(
        title=title, message=message, link=link,
        code=Markup('<p class="code">{status} · <code>{code}</code></p>').format(status=status, code=code)
        if code else Markup(""))
    return page(title, body, viewer=viewer, auth=auth)


def badge(status: str, **attrs: str) -> Markup:
    extra = join(Markup(' {k}="{v}"').format(k=k.replace("_", "-"), v=v) for k, v in attrs.items())
    return Markup('<span class="badge status-{s}"{extra}>{label}</span>').format(
        s=status, extra=extra, label=status.replace("_", " "))


def moment(iso: str | None) -> Markup:
    """A ``<time>`` for an ISO 8601 instant (UTC shown), or a dash."""
    if not iso:
        return Markup('<span class="none">—</span>')
    at = datetime.fromisoformat(iso)
    return Markup('<time datetime="{iso}">{shown}</time>').format(iso=iso, shown=at.strftime("%Y-%m-%d %H:%M:%S UTC"))


def seconds(value: float) -> str:
    """``12.3 s``, ``4 min 05 s``, ``2 h 03 min``."""
    if value < 60:
        return f"{value:.1f} s"
    whole = int(value)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def count(n: int) -> str:
    return f"{n:,}"
