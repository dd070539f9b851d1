"""The trust settings: list values from comma-separated or JSON text, and a wrong value
refuses to start, naming its variable."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.core.settings import Settings, settings_errors


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("CONCLAVE_"):
            monkeypatch.delenv(name)


def test_defaults_trust_nothing() -> None:
    s = Settings()
    assert (s.allow_plan_models, s.allowed_key_envs, s.allowed_base_urls, s.testing, s.models) == \
        (False, [], [], False, None)
    assert s.api_token_scopes == ["admin"] and s.api_token_tenant == "default"
    with pytest.raises(Exception, match="allowlist"):
        s.egress_policy.check("https://api.openai.com/v1")


@pytest.mark.parametrize("value", ["OPENAI_API_KEY, DEEPSEEK_API_KEY", '["OPENAI_API_KEY","DEEPSEEK_API_KEY"]',
                                   "OPENAI_API_KEY,DEEPSEEK_API_KEY,"])
def test_lists_parse_from_commas_or_json(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CONCLAVE_ALLOWED_KEY_ENVS", value)
    monkeypatch.setenv("CONCLAVE_ALLOWED_BASE_URLS", "https://api.openai.com/v1,https://*.example.com")
    monkeypatch.setenv("CONCLAVE_API_TOKEN_SCOPES", "plans:write, plans:read")
    s = Settings()
    assert s.allowed_key_envs == ["OPENAI_API_KEY", "DEEPSEEK_API_KEY"]
    assert s.allowed_base_urls == ["https://api.openai.com/v1", "https://*.example.com"]
    assert s.api_token_scopes == ["plans:read", "plans:write"]
    s.egress_policy.check("https://a.example.com/v1")


@pytest.mark.parametrize(("variable", "value", "words"), [
    ("CONCLAVE_API_TOKEN_SCOPES", "plans:read,root", "unknown scope 'root'"),
    ("CONCLAVE_API_TOKEN_SCOPES", "", "at least one scope"),
    ("CONCLAVE_API_TOKEN_TENANT", "Acme Corp", "tenant"),
    ("CONCLAVE_ALLOWED_BASE_URLS", "https://api.openai.com,api.example.com", "'api.example.com'"),
    ("CONCLAVE_ALLOWED_BASE_URLS", "https://user@api.example.com", "'@'"),
    ("CONCLAVE_ALLOWED_BASE_URLS", "https://a.*.example.com", "not a valid host"),
    ("CONCLAVE_ALLOWED_BASE_URLS", '["https://x.test"', "not a JSON array"),
    ("CONCLAVE_ALLOWED_KEY_ENVS", "CONCLAVE_DATABASE_URL", "Conclave's own"),
    ("CONCLAVE_ALLOWED_KEY_ENVS", "openai-key", "not an environment variable name"),
    ("CONCLAVE_SUBMIT_RATE", "-1", "greater than or equal to 0"),
    ("CONCLAVE_DATABASE_POOLER", "transaction", "Input should be 'none' or 'pgbouncer'"),
    ("CONCLAVE_DATABASE_POOLER", "pgbouncer", "needs a postgresql:// CONCLAVE_DATABASE_URL"),  # embedded: SQLite
    ("CONCLAVE_DATABASE_POOL_SIZE", "1", "greater than or equal to 2"),
    ("CONCLAVE_DATABASE_POOL_SIZE", "eight", "valid integer"),
    ("CONCLAVE_DATABASE_MAX_OVERFLOW", "-1", "greater than or equal to 0"),
    ("CONCLAVE_DATABASE_POOL_TIMEOUT", "0", "greater than 0"),
    ("CONCLAVE_WEBHOOK_SECRET_KEY", "short-key", "at least 32 characters"),
    ("CONCLAVE_WEBHOOK_URLS", "https://hooks.example.com,hooks.example.org", "'hooks.example.org'"),
    ("CONCLAVE_WEBHOOK_TIMEOUT", "120", "less than or equal to 60"),
    ("CONCLAVE_WEBHOOK_RETRY_HOURS", "0.5", "greater than or equal to 1"),
])
def test_a_wrong_value_names_its_variable(monkeypatch: pytest.MonkeyPatch, variable: str, value: str,
                                          words: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as info:
        Settings()
    lines = settings_errors(info.value)
    assert len(lines) == 1 and lines[0].startswith(f"{variable}: "), lines
    assert words in lines[0], lines


def test_environ_round_trips_lists_and_paths(tmp_path: object) -> None:
    s = Settings(allowed_key_envs=["A_KEY"], allowed_base_urls=["https://x.test/v1"], allow_plan_models=True,
                 submit_rate=5)
    again = Settings(**{k.removeprefix("CONCLAVE_").lower(): v for k, v in s.environ().items()})
    assert again == s


def test_authentication_fails_closed_in_a_cluster() -> None:
    """A cluster API needs tokens whether or not one is configured; only an explicit
    CONCLAVE_AUTH=off, or embedded mode with no token, lets every caller in as the operator."""
    cluster = {"broker_url": "redis://127.0.0.1:6379/0", "database_url": "postgresql://db/x"}
    assert Settings(**cluster).auth_required
    assert Settings(**cluster, api_token="t0ken").auth_required
    assert not Settings(**cluster, auth="off").auth_required
    assert not Settings().auth_required  # embedded: the user is the operator
    assert Settings(api_token="t0ken").auth_required
    assert Settings(auth="tokens").auth_required


def test_a_process_holds_its_connection_budget_whatever_its_concurrency(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool is the process's budget (CONCLAVE_DATABASE_POOL_SIZE + _MAX_OVERFLOW), not one
    connection per thread; a thread finding none free waits CONCLAVE_DATABASE_POOL_TIMEOUT."""
    monkeypatch.setenv("CONCLAVE_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/conclave")
    monkeypatch.setenv("CONCLAVE_DATABASE_POOLER", "pgbouncer")
    monkeypatch.setenv("CONCLAVE_CONCURRENCY", "200")
    monkeypatch.setenv("CONCLAVE_DATABASE_POOL_TIMEOUT", "12.5")
    s = Settings()
    assert (s.database_pooler, s.database_pool_size, s.database_max_overflow) == ("pgbouncer", 4, 2)
    db = s.open_database()  # no connection is made until a statement needs one
    pool: Any = db.engine.pool
    assert (pool.size(), pool._max_overflow, pool.timeout()) == (4, 2, 12.5)
    one: Any = s.open_database(pool_size=1).engine.pool  # a start-up check, a CLI command
    assert (one.size(), one._max_overflow) == (1, 0)
