"""Secrets never reach a log line: :class:`Redact`, a filter on every handler.

It rewrites each record before any formatter sees it — the message with its arguments
filled in, the exception's traceback, the stack — replacing

* the **values** of the secrets this process is configured with (:func:`secrets_of`): the
  keys and header values of the operator's models (read from the variables the registry
  names, and from ``CONCLAVE_ALLOWED_KEY_ENVS``), ``CONCLAVE_API_TOKEN``,
  ``CONCLAVE_WEBHOOK_SECRET_KEY``, the Flower password and the passwords in the database,
  broker, result backend and Redis URLs;
* the **shapes** of secrets it cannot know: issued API tokens (``conclave_<id>_<secret>``
  keeps its principal id), webhook signing secrets (``whsec_…``), ``Authorization`` /
  ``X-Api-Key`` / ``Api-Key`` header values,
  ``Bearer …`` credentials, ``password=`` / ``token=`` / ``api_key=`` values and the password
  of any URL.

Celery's own lines (a task received, succeeded, failed, retried) go through the same
handlers, so what they print of a task is redacted too. Values shorter than
:data:`MIN_SECRET` characters are not searched for (they would blank out ordinary words).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable
from urllib.parse import unquote, urlsplit

from orchestrator.core.errors import InvalidConfiguration
from orchestrator.core.settings import Settings
from orchestrator.plan.registry import load_registry
from storage.identity import TOKEN_PREFIX
from storage.webhook_outbox import SECRET_PREFIX as WEBHOOK_SECRET_PREFIX

MIN_SECRET = 4
MASK = "***"

def _header(match: re.Match[str]) -> str:
    name, separator, scheme = match.group(1, 2, 3)
    return f"{name}{separator}{scheme + ' ' if scheme else ''}{MASK}"


_SHAPES: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    # an issued token: conclave_<principal id>_<secret> (the id is not a secret; keep it)
    (re.compile(rf"\b({re.escape(TOKEN_PREFIX)}[0-9a-f]{{16}}_)[A-Za-z0-9_-]+"), rf"\1{MASK}"),
    # a webhook endpoint's signing secret: whsec_<secret>
    (re.compile(rf"\b({re.escape(WEBHOOK_SECRET_PREFIX)})[A-Za-z0-9_-]+"), rf"\1{MASK}"),
    # header values: "Authorization: Bearer x", 'authorization': 'Basic x', X-Api-Key=x
    (re.compile(r"(?i)\b((?:proxy-)?authorization|x-api-key|api-key)([\"']?\s*[:=]\s*[\"']?)"
                r"(?:(bearer|basic|digest|token)\s+)?[^\s\"',;}]+"), _header),
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]+"), rf"\1 {MASK}"),
    # key=value / "key": "value" for names that hold secrets (client_secret, OPENAI_API_KEY, token)
    (re.compile(r"(?i)\b([a-z0-9_-]*(?:password|passwd|secret|api[_-]?key|access[_-]?token|refresh[_-]?token)|token)"
                r"([\"']?\s*[:=]\s*[\"']?)[^\s\"',;}&]+"), rf"\1\2{MASK}"),
    # a URL's password: scheme://user:password@host
    (re.compile(r"\b([a-z][a-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@"), rf"\1{MASK}@"),
)


class Redactor:
    """Replaces the given secret values, and the shapes of secrets, in a text."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = sorted({s for s in secrets if s and len(s) >= MIN_SECRET}, key=len, reverse=True)
        self._values = re.compile("|".join(re.escape(v) for v in values)) if values else None

    def __call__(self, text: str) -> str:
        if self._values is not None:
            text = self._values.sub(MASK, text)
        for pattern, replacement in _SHAPES:
            text = pattern.sub(replacement, text)
        return text


class Redact(logging.Filter):
    """Put on every handler (after :class:`~orchestrator.logs.context.ContextFilter`):
    the record leaves it with its message, traceback and stack redacted."""

    _traceback = logging.Formatter()

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed call: redact what there is, let the handler report it
            message = str(record.msg)
        record.msg, record.args = self.redactor(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._traceback.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor(record.stack_info)
        return True


def secrets_of(settings: Settings) -> list[str]:
    """The secret values this process is configured with (see the module docstring)."""
    found: list[str] = []
    for secret in (settings.api_token, settings.flower_password, settings.webhook_secret_key):
        if secret is not None:
            found.append(secret.get_secret_value())
    for url in (settings.database_url, settings.broker_url, settings.result_backend, settings.redis_url):
        password = _password(url)
        if password:
            found += [password, unquote(password)]
    return found + [value for name in _key_variables(settings) if (value := os.environ.get(name))]


def _key_variables(settings: Settings) -> set[str]:
    """The variables whose values are model keys: named by the registry (``api_key_env`` and
    ``headers``) and allowed to plans (``CONCLAVE_ALLOWED_KEY_ENVS``)."""
    names = set(settings.allowed_key_envs)
    if settings.models is None:
        return names
    try:
        registry = load_registry(settings.models)
    except InvalidConfiguration:  # the entry point that uses the registry refuses to start over it
        return names
    for model in registry.values():
        if model.api_key_env:
            names.add(model.api_key_env)
        names.update(model.headers.values())
    return names


def _password(url: str | None) -> str | None:
    if not url:
        return None
    try:
        return urlsplit(url).password
    except ValueError:
        return None
