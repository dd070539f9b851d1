"""Liveness of a fleet process (``conclave health worker|beat``), as a container's health
check asks it.

The probe asks the process itself, over the broker, by its Celery node name, and it has
to answer: a worker answers a ``ping`` from its consumer, the loop that takes its work
from the broker, so an answer proves it is connected and taking messages, not just that
its process exists; beat (Celery's beat remote control, switched on by
:func:`orchestrator.fleet.celery_app.build_app`) answers only while its scheduler has ticked
within ``beat_remote_control_max_tick_age``. A dead, stopped or wedged process, or one cut
off from the broker, does not answer within the timeout.
"""

from __future__ import annotations

from typing import Literal

from celery import Celery
from celery.beat import beat_nodename
from celery.utils.nodenames import default_nodename, host_format

Role = Literal["worker", "beat"]
ROLES: tuple[Role, ...] = ("worker", "beat")


def node_name(role: Role, hostname: str | None = None) -> str:
    """The node name the process answers as, resolved as Celery resolves it: ``hostname``
    (``-n`` of the process; ``%h`` expands) or the default on this host — ``celery@<host>``
    for ``conclave worker``, ``celerybeat@<host>`` for ``conclave beat``."""
    if role == "beat":
        return str(beat_nodename(hostname))
    return str(host_format(default_nodename(hostname)))


def answers(app: Celery, node: str, timeout: float) -> bool:
    """Whether ``node`` answers a ping over ``app``'s broker within ``timeout`` seconds.
    A broker that cannot be reached raises (kombu's connection errors)."""
    replies = app.control.ping(destination=[node], timeout=timeout)
    return any(node in reply for reply in replies or ())
