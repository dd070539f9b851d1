"""How a compiled canvas reaches the workers, in the shape of httpx's transports.

:class:`Dispatcher` is a one-method interface, ``send(canvas)``, which raises when the
canvas could not be handed over. :class:`CeleryDispatcher` sends it through a Celery
app by task name; :class:`RecordingDispatcher` keeps what it was given (and may pass it
to a handler) so tests can drive the coordinator without a broker.
"""

from orchestrator.dispatch.base import Dispatcher
from orchestrator.dispatch.celery import CeleryDispatcher
from orchestrator.dispatch.recording import RecordingDispatcher

__all__ = ["CeleryDispatcher", "Dispatcher", "RecordingDispatcher"]
