"""Log lines: JSON or text as asked, the context on every line, and no secret in any part of
a record (message, arguments, traceback, Celery's task lines). The end-to-end check with
real processes is ``tests/e2e/test_log_lines.py``."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr

from orchestrator.core.settings import Settings
from orchestrator.logs import JsonLines, LogSetup, Redactor, bind, configure, secrets_of, wants_json
from orchestrator.logs.formats import KEYS

KEY = "sk-unit-PROVIDER-0f1e2d3c4b5a6978"
PLAN = "0c3e8f4a-5b6d-4e7f-8a9b-0c1d2e3f4a5b"
ISSUED = "conclave_0123456789abcdef_Zq3kP9xW-7mN_v2LbR8tYc4sHf1jGd6uEa5oTi0QwXy"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _logger(setup: LogSetup, stream: io.StringIO, name: str = "test.logs") -> logging.Logger:
    handler = logging.StreamHandler(stream)
    setup.dress(handler, logging.Formatter("%(levelname)s %(message)s [plan=%(plan_id)s]"))
    logger = logging.getLogger(name)
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger


def test_the_format_is_json_unless_asked_for_text_or_written_to_a_terminal() -> None:
    assert wants_json("auto", io.StringIO()) and not wants_json("auto", Terminal())
    assert wants_json("json", Terminal()) and not wants_json("text", io.StringIO())
    closed = io.StringIO()
    closed.close()
    assert wants_json("auto", closed)


def test_a_json_line_has_the_documented_keys_and_the_bound_context() -> None:
    out = io.StringIO()
    log = _logger(LogSetup("json", Redactor()), out)
    with bind(plan_id=PLAN, phase="r1.dana", worker="w1@host"), bind(attempt=2):
        log.info("phase %s %s", "r1.dana", "completed", extra={"action": "phase.completed"})
    log.warning("action=llm_retry model=gpt retry=1")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("phase crashed", extra={"action": "phase.crashed"})
    first, second, third = (json.loads(line) for line in out.getvalue().splitlines())
    assert list(first) == list(KEYS)
    assert first["timestamp"].endswith("Z") and "T" in first["timestamp"]
    assert (first["level"], first["logger"], first["action"], first["message"]) == \
        ("INFO", "test.logs", "phase.completed", "phase r1.dana completed")
    assert (first["plan_id"], first["phase"], first["attempt"], first["worker"]) == (PLAN, "r1.dana", 2, "w1@host")
    assert (second["action"], second["plan_id"], second["attempt"]) == ("llm_retry", None, None)
    assert third["exception"].startswith("Traceback") and "RuntimeError: boom" in third["exception"]


def test_text_lines_carry_the_context_too() -> None:
    out = io.StringIO()
    log = _logger(LogSetup("text", Redactor()), out)
    with bind(plan_id=PLAN):
        log.info("hello")
    assert out.getvalue() == f"INFO hello [plan={PLAN}]\n"


def test_configured_secrets_and_the_shapes_of_credentials_are_redacted() -> None:
    redact = Redactor([KEY, "db-Pass-w0rd", "abc"])  # a 3-character value is not searched for
    text = redact(
        f"key {KEY} in 'authorization': 'Bearer {KEY}x', Authorization: Basic dXNlcjpwYXNz, x-api-key={KEY}; "
        f"url postgresql+psycopg://app:other-Secret@db:5432/conclave and redis://:db-Pass-w0rd@cache/0, "
        f"token={ISSUED}&password=hunter22 issued {ISSUED} bearer eyJhbGciOi.eyJzdWIi.c2ln client_secret=cs-9 "
        f"OPENAI_API_KEY=sk-env-1 'db_password': 'pw-7' abc")
    for secret in (KEY, "db-Pass-w0rd", "other-Secret", "dXNlcjpwYXNz", "hunter22", ISSUED[26:], "eyJhbGciOi",
                   "cs-9", "sk-env-1", "pw-7"):
        assert secret not in text, secret
    assert "'authorization': 'Bearer ***'" in text and "Authorization: Basic ***" in text
    assert "postgresql+psycopg://app:***@db:5432/conclave" in text and "redis://:***@cache/0" in text
    assert "issued conclave_0123456789abcdef_***" in text  # the principal id stays: it names no secret
    assert text.endswith(" abc")
    # what is not a secret is left alone: ids, token counts, variable names
    ordinary = f"plan {PLAN} used input_tokens=12 max_tokens=1024, 3 tokens: api_key_env=OPENAI_API_KEY"
    assert redact(ordinary) == ordinary


def test_every_part_of_a_record_is_redacted_before_it_is_formatted() -> None:
    out = io.StringIO()
    log = _logger(LogSetup("json", Redactor([KEY])), out)
    log.warning("upstream said %s", {"error": f"bad key {KEY}"})  # in the arguments
    try:
        raise ValueError(f"request failed with headers {{'authorization': 'Bearer {KEY}'}}")
    except ValueError:
        log.error("call failed", exc_info=True)  # in the traceback
    log.info("stack", stack_info=True)
    # Celery's task lines: a format filled from a dict of the task's request
    log.info("Task %(name)s[%(id)s] succeeded in %(runtime)ss: %(return_value)s",
             {"name": "conclave.run_phase", "id": "t-1", "runtime": 0.1, "return_value": f"'{KEY}'",
              "args": f"('{KEY}',)"})
    text = out.getvalue()
    assert KEY not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines[0]["message"] == "upstream said {'error': 'bad key ***'}"
    assert "ValueError: request failed with headers {'authorization': 'Bearer ***'}" in lines[1]["exception"]
    assert "stack" in lines[2] and lines[3]["message"] == "Task conclave.run_phase[t-1] succeeded in 0.1s: '***'"


def test_the_secrets_of_a_process_are_its_keys_tokens_and_passwords(tmp_path: Path, monkeypatch: Any) -> None:
    registry = tmp_path / "models.yaml"
    registry.write_text(yaml.safe_dump({"models": {
        "gpt": {"provider": "openai", "model": "m", "base_url": "https://api.example.com/v1",
                "api_key_env": "UNIT_KEY", "headers": {"X-Org": "UNIT_HEADER"}},
        "default": {"provider": "offline"}}}))
    monkeypatch.setenv("UNIT_KEY", KEY)
    monkeypatch.setenv("UNIT_HEADER", "header-value-1")
    monkeypatch.setenv("PLAN_KEY", "plan-key-value")
    settings = Settings(models=registry, allowed_key_envs=["PLAN_KEY"], api_token=SecretStr("the-api-token"),
                        database_url="postgresql://app:p%40ss-word@db/conclave",
                        broker_url="redis://:broker-pw@cache:6379/0")
    found = set(secrets_of(settings))
    assert {KEY, "header-value-1", "plan-key-value", "the-api-token", "p%40ss-word", "p@ss-word",
            "broker-pw"} <= found
    registry.write_text("models: [")  # a broken registry: the entry point refuses it; logs still start
    assert "the-api-token" in secrets_of(settings) and KEY not in secrets_of(settings)


def test_configure_installs_one_dressed_handler_on_the_root(monkeypatch: Any) -> None:
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    out = io.StringIO()
    try:
        configure(Settings(api_token=SecretStr("root-token-123"), log_format="auto"), "INFO", stream=out)
        configure(Settings(api_token=SecretStr("root-token-123"), log_format="auto"), "INFO", stream=out)
        ours = [h for h in root.handlers if getattr(h, "_conclave", False)]
        assert len(ours) == 1
        logging.getLogger("test.root").info("token root-token-123 seen")
        assert json.loads(out.getvalue())["message"] == "token *** seen"
    finally:
        root.handlers = before
        root.setLevel(level)
        logging.captureWarnings(False)


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_a_redacted_line_stays_redacted_through_a_second_handler(log_format: str) -> None:
    first, second = io.StringIO(), io.StringIO()
    setup = LogSetup(log_format, Redactor([KEY]))  # type: ignore[arg-type]
    log = _logger(setup, first, "test.two")
    extra = logging.StreamHandler(second)
    setup.dress(extra, logging.Formatter("%(message)s"))
    log.addHandler(extra)
    log.info("key %s", KEY)
    assert KEY not in first.getvalue() + second.getvalue() and "***" in second.getvalue()
    assert isinstance(log.handlers[0].formatter, JsonLines) == (log_format == "json")
