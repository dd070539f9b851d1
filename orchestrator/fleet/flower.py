"""Flower for a cluster (``conclave flower``), behind HTTP basic auth from the settings.

Flower shows every task's arguments (plan and phase ids) and can revoke and shut down
workers, so a cluster's Flower never runs open by accident: ``CONCLAVE_FLOWER_USER`` and
``CONCLAVE_FLOWER_PASSWORD`` become Flower's ``FLOWER_BASIC_AUTH`` — handed over in its
environment, never on a command line (``ps`` shows command lines to every user) — and
without them it refuses to start, unless ``CONCLAVE_FLOWER_AUTH=off`` says to run it open.
"""

from __future__ import annotations

from orchestrator.core.errors import InvalidConfiguration
from orchestrator.core.settings import Settings

#: Flower reads each of its options from a ``FLOWER_<OPTION>`` variable as well.
BASIC_AUTH = "FLOWER_BASIC_AUTH"


def basic_auth(settings: Settings) -> str | None:
    """Flower's ``FLOWER_BASIC_AUTH`` (``user:password``) from ``settings``; ``None`` when
    ``CONCLAVE_FLOWER_AUTH=off``. Refuses (naming the variables) a Flower with no broker
    to watch, or with authentication on and no credentials."""
    if settings.broker_url is None:
        raise InvalidConfiguration("CONCLAVE_BROKER_URL is not set: Flower watches a cluster's broker "
                                   "(embedded mode has no broker to watch)")
    if settings.flower_auth == "off":
        return None
    user, password = settings.flower_user, settings.flower_password
    if user is None or password is None:
        missing = [name for name, value in (("CONCLAVE_FLOWER_USER", user), ("CONCLAVE_FLOWER_PASSWORD", password))
                   if value is None]
        raise InvalidConfiguration(
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set: a cluster's Flower requires "
            "basic auth (CONCLAVE_FLOWER_AUTH=off runs it open to anyone who reaches its port)")
    return f"{user}:{password.get_secret_value()}"
