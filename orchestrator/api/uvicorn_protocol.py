"""uvicorn's HTTP/1.1 protocol, with the one answer it writes itself — the 400 for a request
it cannot parse — in the API's JSON error shape, so every error a client sees is JSON."""

from __future__ import annotations

import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from orchestrator.api.error_responses import error_body


class JsonErrorsProtocol(H11Protocol):
    def send_400_response(self, msg: str) -> None:
        body = json.dumps(error_body("http.bad_request", "malformed HTTP request",
                                     [{"field": "request", "message": "not a valid HTTP/1.1 request"}])).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body),
                      h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()
