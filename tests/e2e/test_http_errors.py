"""Every error a client sees is JSON — also the 400 the HTTP server writes itself for a
request it cannot parse, before any route runs."""

from __future__ import annotations

import json
import socket
from typing import Any

from tests.e2e.test_api import api  # noqa: F401  (api: the API server fixture)


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        chunks = []
        while data := s.recv(65536):
            chunks.append(data)
    return b"".join(chunks)


def test_an_unparseable_request_gets_a_json_400(api: Any) -> None:  # noqa: F811
    server = api()
    for request in (b"GET /v1/plans HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n",
                    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n",  # TLS to a plain port
                    b"GET /v1 plans HTTP/1.1\r\nHost: x\r\n\r\n"):
        head, _, body = _raw(server.port, request).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400"), head
        assert b"content-type: application/json" in head.lower()
        error = json.loads(body)["error"]
        assert error["code"] == "http.bad_request" and error["details"] == [
            {"field": "request", "message": "not a valid HTTP/1.1 request"}]
    assert "Traceback" not in server.log()
