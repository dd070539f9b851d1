"""The published contract holds: schemathesis generates requests from the served
``/openapi.json`` (a bounded number per operation, stateful sequences included) against
a real ``conclave api`` with authentication on, and every response must be a documented
status with a documented content type whose body conforms to the schema — and never a
5xx. The event stream is left out (a running plan's stream does not end; its contract is
tested in test_api.py and test_remote.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_api import api  # noqa: F401  (api: the API server fixture)

TOKEN = "contract-token-0123456789abcdef"
SCHEMATHESIS = str(Path(sys.executable).parent / "schemathesis")
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


@pytest.mark.timeout(900)
def test_every_response_conforms_to_the_served_schema(api: Any, tmp_path: Path) -> None:  # noqa: F811
    server = api(env={"CONCLAVE_API_TOKEN": TOKEN,  # webhooks on: their routes answer with what they store
                      "CONCLAVE_WEBHOOK_SECRET_KEY": "contract-" + "k" * 40,
                      "CONCLAVE_WEBHOOK_URLS": "https://hooks.example.com,https://*.example.org"})
    run = subprocess.run(
        [SCHEMATHESIS, "run", f"{server.url}/openapi.json", "--checks", CHECKS, "--max-examples", "15",
         "--header", f"Authorization: Bearer {TOKEN}", "--exclude-path-regex", "/events$",
         "--request-timeout", "30", "--wait-for-schema", "30", "--generation-deterministic", "--no-color"],
        cwd=tmp_path, capture_output=True, text=True, timeout=800)
    report = run.stdout[-6000:] + run.stderr[-2000:]
    assert run.returncode == 0, report
    assert "generated" in run.stdout and " passed" in run.stdout, report
    log = server.log()
    assert "Traceback" not in log and " 500" not in log, log[-3000:]
    assert TOKEN not in log
