"""A worker's ``/metrics`` over HTTP: prometheus_client's exporter on a daemon thread of the
worker's main process (the prefork parent), serving :func:`orchestrator.metrics.processes.registry`.

Off unless ``CONCLAVE_METRICS_PORT`` is set (``0``: any free port, logged); bound to
``CONCLAVE_METRICS_HOST`` (127.0.0.1 unless the operator opens it). One per process.
"""

from __future__ import annotations

import logging
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

log = logging.getLogger(__name__)

_server: WSGIServer | None = None
_lock = threading.Lock()


def serve(host: str, port: int, registry: CollectorRegistry) -> int:
    """Serve ``registry`` on ``host:port`` (0: any free port) unless this process already
    does; returns the port it listens on."""
    global _server
    with _lock:
        if _server is None:
            _server, _ = start_http_server(port, addr=host, registry=registry)
            log.info("metrics on http://%s:%d/metrics", host, _server.server_port,
                     extra={"action": "metrics.serving"})
        return int(_server.server_port)


def stop() -> None:
    global _server
    with _lock:
        if _server is not None:
            _server.shutdown()
            _server.server_close()
            _server = None
