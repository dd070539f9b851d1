"""Configuration: one typed object, read from ``CONCLAVE_*`` environment variables by
entry points (CLI, API, worker) and passed down. No module reads the environment.

With neither ``CONCLAVE_BROKER_URL`` nor ``CONCLAVE_DATABASE_URL`` set, Conclave
runs *embedded*: a SQLite file under ``CONCLAVE_HOME`` and an in-process worker on
kombu's in-memory transport (a real Celery worker, not eager mode).

List-valued settings (``CONCLAVE_ALLOWED_KEY_ENVS``, ``CONCLAVE_ALLOWED_BASE_URLS``,
``CONCLAVE_WEBHOOK_URLS``, ``CONCLAVE_API_TOKEN_SCOPES``) take a comma-separated value or a JSON array. A value
that is wrong (an unknown scope, a malformed URL pattern, a ``CONCLAVE_*`` key
variable) refuses to start, naming the variable (:func:`settings_errors`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from orchestrator.gateway.egress import EgressPolicy, UrlPattern
from storage import Database, connect
from storage.db import Pooler
from storage.identity import DEFAULT_TENANT, check_tenant, parse_scopes

ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]{0,99}$")
MIN_WEBHOOK_KEY = 32
OWN_PREFIX = "CONCLAVE_"

StrList = Annotated[list[str], NoDecode]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CONCLAVE_", extra="ignore")

    database_url: str | None = Field(None, description="SQLAlchemy URL; Postgres in a cluster")
    broker_url: str | None = Field(None, description="Celery broker, e.g. redis://127.0.0.1:6379/0")
    result_backend: str | None = Field(None, description="Celery result backend (chords); default: the Redis broker")
    redis_url: str | None = Field(None, description="Redis for live streams (pub/sub); default: the Redis broker")
    home: Path = Field(Path(".conclave"), description="Where embedded mode keeps its SQLite file")
    state_dir: Path = Field(default_factory=lambda: Path.home() / ".local" / "state" / "conclave",
                            description="Where beat keeps its schedule file (never the working directory)")

    database_pooler: Pooler = Field(
        "none", description="What stands between each process and Postgres: `none`, or `pgbouncer` in transaction "
                            "pooling mode (then no server-side prepared statements and no session state)")
    database_pool_size: int = Field(
        4, ge=2, le=1000, description="Database connections each worker or API process keeps, whatever its "
                                      "concurrency (at least 2: a sweep holds its lock's while it works)")
    database_max_overflow: int = Field(
        2, ge=0, le=1000, description="Connections a process may open beyond its pool at a peak, closed when "
                                      "returned")
    database_pool_timeout: float = Field(
        30.0, gt=0, description="How long a thread waits for a free connection (s) before its statement counts as "
                                "the database unavailable, and is retried")

    pool: Literal["threads", "prefork", "solo", "gevent"] = Field("threads", description="Worker pool")
    concurrency: int = Field(32, ge=1, le=1000, description="Phases in flight per worker")
    visibility_timeout: int = Field(
        21600, ge=60, description="Redis redelivery backstop (s); longer than any model call")
    lease_seconds: float = Field(20.0, gt=0.5, description="Phase lease; renewed every third of it")
    requeue_after: float = Field(
        60.0, gt=0, description="Re-send a phase enqueued this long ago and not claimed (s)")
    reconcile_interval: float = Field(10.0, gt=0, description="Beat period of the reconciler (s)")
    resume_guard_seconds: float = Field(10.0, gt=0, description="How long a resume holds its plan's guard")
    db_retry_seconds: float = Field(120.0, ge=0, description="How long a worker retries a failed result write")

    inline_limit: int = Field(4000, ge=200, description="Results longer than this are shown by reference")
    summary_chars: int = Field(480, ge=50, description="Length of the short summary a phase keeps")
    max_plan_bytes: int = Field(1_000_000, ge=1000, description="Largest accepted plan document")
    max_active_plans: int = Field(1000, ge=1, description="Running plans beyond this are refused")
    max_respond_within: int = Field(
        7 * 86400, ge=60, le=30 * 86400,
        description="The longest a person's seat may wait for its answer (s): a plan's respond_within past it "
                    "is refused at submit naming the field; a seat without one waits a day, or this if less")
    retention_days: float = Field(30.0, gt=0, description="Finished plans' events older than this are pruned")
    max_events_per_plan: int = Field(5000, ge=100, description="Events kept per finished plan")
    retain_finished_days: float = Field(
        0.0, ge=0, description="Finished plans older than this are deleted with all their rows (0: kept forever)")
    retention_batch: int = Field(100, ge=1, le=10_000, description="Plans retention handles per transaction")
    retention_pass_plans: int = Field(
        1000, ge=1, description="Most plans one retention pass deletes (and trims), per step")

    briefing_max_documents: int = Field(100, ge=1, description="Most documents in one plan's briefing")
    briefing_max_document_bytes: int = Field(
        200_000, ge=1000, description="Largest briefing document (UTF-8 bytes); larger local files are skipped")
    briefing_max_bytes: int = Field(800_000, ge=1000, description="All of one plan's briefing documents together")
    briefing_max_chunks: int = Field(2000, ge=1, description="Most chunks one plan's briefing may be split into")
    briefing_rerank: bool = Field(
        True, description="Rerank retrieved passages with an embedding model when `conclave[rerank]` is installed")
    briefing_context_tokens: int = Field(
        2000, ge=0, description="Most tokens of briefing passages one expert's prompt carries (at most half of "
                                "what the model's window leaves free; 0: none)")

    default_provider: str = Field("offline", description="Provider for models a plan does not configure")
    first_chunk_timeout: float = Field(30.0, gt=0, description="Stream guard: wait for the first chunk (s)")
    idle_timeout: float = Field(30.0, gt=0, description="Stream guard: longest gap between chunks (s)")
    call_deadline: float = Field(300.0, gt=0, description="Stream guard: overall deadline of a call (s)")
    max_call_seconds: float = Field(
        900.0, gt=0, description="The ceiling on every model's deadline and stream timeouts (s): the defaults "
                                 "above, the registry's models and plan-defined ones; what one call may hold a "
                                 "worker thread for")
    max_output_tokens: int = Field(1024, ge=16, description="Default output reserve per call")
    context_window: int = Field(32768, ge=512, description="Default model context window (tokens)")
    offline_latency: float = Field(  # the bound is OfflineOptions.latency's (offline/options.py)
        0.02, ge=0, le=2.0, description="Offline provider: seconds between chunks (at most 2)")

    log_level: str = Field("INFO", description="Log level of entry points")
    log_format: Literal["json", "text", "auto"] = Field(
        "auto", description="Log lines as JSON objects (`json`), as text (`text`), or JSON unless written to a "
                            "terminal (`auto`)")
    otel: bool = Field(False, description="Trace with OpenTelemetry when `conclave[otel]` is installed (the "
                                          "exporter reads the standard OTEL_* variables)")
    metrics_port: int | None = Field(
        None, ge=0, le=65535, description="Worker: serve Prometheus metrics on this port (0: any free port, "
                                          "logged); unset: no exporter")
    metrics_host: str = Field("127.0.0.1", min_length=1, description="Worker: the address the exporter binds")
    auth: Literal["tokens", "off"] | None = Field(
        None, description="API authentication: `tokens` (every /v1 route and /metrics need a bearer token: "
                          "CONCLAVE_API_TOKEN or one from `conclave tokens create`) or `off`; default: tokens "
                          "in a cluster or when CONCLAVE_API_TOKEN is set, off in embedded mode")
    api_token: SecretStr | None = Field(
        None, description="One token for simple setups (admin unless CONCLAVE_API_TOKEN_SCOPES says otherwise)")
    api_token_scopes: StrList = Field(
        default_factory=lambda: ["admin"], description="Scopes of CONCLAVE_API_TOKEN (default: admin)")
    api_token_tenant: str = Field(DEFAULT_TENANT, description="Tenant of CONCLAVE_API_TOKEN's submissions")
    ui_session_hours: float = Field(
        8.0, gt=0, le=720, description="How long a plan-page sign-in (/ui/login) lasts before the browser must "
                                       "sign in again (a revoked token ends it at once)")
    flower_user: str | None = Field(None, description="`conclave flower`: the basic-auth user")
    flower_password: SecretStr | None = Field(None, description="`conclave flower`: the basic-auth password")
    flower_auth: Literal["basic", "off"] = Field(
        "basic", description="`conclave flower`: `basic` (refuses to start without CONCLAVE_FLOWER_USER and "
                             "CONCLAVE_FLOWER_PASSWORD) or `off` (Flower open to anyone who reaches its port)")

    models: Path | None = Field(None, description="The operator's model registry (YAML or JSON file)")
    allow_plan_models: bool = Field(False, description="Cluster: accept plans that define their own models")
    allowed_key_envs: StrList = Field(
        default_factory=list, description="Cluster: variables a plan-defined model may name as api_key_env")
    allowed_base_urls: StrList = Field(
        default_factory=list, description="Cluster: URL patterns a plan-defined model's base_url must match")
    webhook_secret_key: SecretStr | None = Field(
        None, description="The operator's key from which each webhook endpoint's signing secret is derived (at "
                          "least 32 characters, the same on the API and on every worker); unset: no endpoint can be "
                          "registered and no worker delivers")
    webhook_urls: StrList = Field(
        default_factory=list, description="URL patterns a webhook endpoint's url must match (the syntax and address "
                                          "rules of CONCLAVE_ALLOWED_BASE_URLS); empty: none")
    webhook_timeout: float = Field(
        10.0, gt=0, le=60, description="The longest one webhook delivery may take, connecting and answering (s)")
    webhook_retry_hours: float = Field(
        72.0, ge=1, le=720, description="A delivery not answered with a 2xx is retried with backoff for this long "
                                        "after its event (h), then marked failed")
    webhook_interval: float = Field(
        2.0, gt=0, le=60, description="How often each worker looks for webhook deliveries that are due (s)")
    webhook_concurrency: int = Field(4, ge=1, le=64, description="Webhook deliveries each worker sends at once")
    submit_rate: int = Field(600, ge=0, description="Submissions per minute per tenant (0: no limit)")
    max_streams: int = Field(256, ge=1, description="Event streams one API process keeps open at once")
    max_streams_per_tenant: int | None = Field(
        None, ge=1, description="Of those, the most one tenant may hold (default: a quarter of CONCLAVE_MAX_STREAMS)")
    tenant_monthly_usd: float | None = Field(
        None, gt=0, description="Each tenant's budget per calendar month (UTC), in US dollars, at the registry's "
                                "prices: a call past it is refused, a submit once it is spent is a 402 "
                                "(`tenant.budget_exhausted`); unset: none (CONCLAVE_TENANT_BUDGETS overrides)")
    tenant_budgets: Annotated[dict[str, float], NoDecode] = Field(
        default_factory=dict, description="Per-tenant monthly budgets in US dollars, overriding "
                                          "CONCLAVE_TENANT_MONTHLY_USD: `acme=50,beta=10` or a JSON object")
    tenant_max_in_flight: int = Field(
        0, ge=0, description="Fair share: the most phases one tenant may have running at once across the fleet; "
                             "ready phases past it wait in Postgres (held) until its own phases finish; "
                             "0: no limit (CONCLAVE_TENANT_IN_FLIGHT overrides per tenant)")
    tenant_in_flight: Annotated[dict[str, float], NoDecode] = Field(
        default_factory=dict, description="Per-tenant limits of phases in flight, overriding "
                                          "CONCLAVE_TENANT_MAX_IN_FLIGHT: `acme=8,beta=2` or a JSON object")
    tenant_weights: Annotated[dict[str, float], NoDecode] = Field(
        default_factory=dict, description="Weights of the weighted round-robin in which held phases of "
                                          "different tenants are released (default 1): `acme=3,beta=1`")
    fleet_max_in_flight: int = Field(
        0, ge=0, description="The most phases the whole fleet runs at once under fair share (0: no fleet cap); "
                             "a slot it frees goes to the tenants with held work by weighted round-robin")
    testing: bool = Field(False, description="Accept test-only behaviour (the offline model's fault switches), "
                                             "on the API and on each worker; never in production")

    @field_validator("api_token_scopes", "allowed_key_envs", "allowed_base_urls", "webhook_urls", mode="before")
    @classmethod
    def _list(cls, value: Any) -> Any:
        """A comma-separated string or a JSON array."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON array: {exc.msg}") from None
        return [part.strip() for part in text.split(",") if part.strip()]

    @field_validator("tenant_in_flight", "tenant_weights", mode="before")
    @classmethod
    def _shares(cls, value: Any) -> Any:
        """``tenant=number`` pairs, comma-separated, or a JSON object; each tenant once."""
        return _dollars_by_tenant(_pairs(value, "number") if isinstance(value, str) else value, unit="a number")

    def in_flight_limit(self, tenant: str) -> int:
        """The most phases ``tenant`` may have running at once (0: no limit)."""
        return int(self.tenant_in_flight.get(tenant, self.tenant_max_in_flight))

    def weight(self, tenant: str) -> float:
        """The tenant's weight in the round-robin of releases (1 unless the operator set one)."""
        return self.tenant_weights.get(tenant, 1.0)

    @property
    def fair_share(self) -> bool:
        """Some limit of phases in flight is set (otherwise a claim and a completion pay nothing for it)."""
        return bool(self.tenant_max_in_flight or self.tenant_in_flight or self.fleet_max_in_flight)

    @field_validator("tenant_budgets", mode="before")
    @classmethod
    def _budgets(cls, value: Any) -> Any:
        """``tenant=dollars`` pairs, comma-separated, or a JSON object; each tenant once."""
        if not isinstance(value, str):
            return _dollars_by_tenant(value)
        return _dollars_by_tenant(_pairs(value))

    def tenant_budget(self, tenant: str) -> float | None:
        """The tenant's budget for a calendar month in US dollars, or None when it has none."""
        return self.tenant_budgets.get(tenant, self.tenant_monthly_usd)

    @property
    def tenant_budgeted(self) -> bool:
        """Some tenant has a monthly budget (otherwise no call or submit pays a statement for one)."""
        return self.tenant_monthly_usd is not None or bool(self.tenant_budgets)

    @field_validator("api_token_scopes")
    @classmethod
    def _scopes(cls, value: list[str]) -> list[str]:
        return list(parse_scopes(value))

    @field_validator("api_token_tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        return check_tenant(value)

    @field_validator("flower_user", "flower_password")
    @classmethod
    def _flower_credential(cls, value: Any, info: ValidationInfo) -> Any:
        """Flower splits FLOWER_BASIC_AUTH at commas, and a basic-auth user ends at the first colon."""
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        forbidden = ",:" if info.field_name == "flower_user" else ","
        if text is not None and (not text or any(c in text for c in forbidden)):
            raise ValueError(f"must be non-empty and contain no {' or '.join(repr(c) for c in forbidden)}")
        return value

    @field_validator("allowed_key_envs")
    @classmethod
    def _key_envs(cls, value: list[str]) -> list[str]:
        for name in value:
            if not ENV_NAME_RE.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name (A-Z, 0-9, _)")
            if name.startswith(OWN_PREFIX):
                raise ValueError(f"{name!r}: a plan may never read Conclave's own {OWN_PREFIX}* variables")
        return value

    @field_validator("allowed_base_urls", "webhook_urls")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            UrlPattern.parse(pattern)  # raises ValueError naming the pattern and the problem
        return [p.strip() for p in value]

    @field_validator("webhook_secret_key")
    @classmethod
    def _webhook_key(cls, value: SecretStr | None) -> SecretStr | None:
        """A key every secret is derived from: long enough that it cannot be guessed."""
        if value is not None and len(value.get_secret_value().strip()) < MIN_WEBHOOK_KEY:
            raise ValueError(f"must be at least {MIN_WEBHOOK_KEY} characters (e.g. `openssl rand -hex 32`)")
        return value

    @field_validator("database_pooler")
    @classmethod
    def _pooler(cls, value: str, info: ValidationInfo) -> str:
        url = info.data.get("database_url")
        if value != "none" and not (url or "").startswith("postgresql"):
            raise ValueError(f"{value} pools Postgres connections: it needs a postgresql:// CONCLAVE_DATABASE_URL")
        return value

    @model_validator(mode="after")
    def _within_the_ceiling(self) -> Settings:
        for name in ("first_chunk_timeout", "idle_timeout", "call_deadline"):
            if getattr(self, name) > self.max_call_seconds:
                raise ValueError(f"CONCLAVE_{name.upper()}: {getattr(self, name):g} is above CONCLAVE_MAX_CALL_SECONDS "
                                 f"({self.max_call_seconds:g}), the longest one model call may take")
        return self

    @model_validator(mode="after")
    def _derive(self) -> Settings:
        if self.result_backend is None and self.broker_url and self.broker_url.startswith("redis"):
            self.result_backend = self.broker_url
        if self.redis_url is None and self.broker_url and self.broker_url.startswith("redis"):
            self.redis_url = self.broker_url
        return self

    @property
    def embedded(self) -> bool:
        return self.broker_url is None

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.home / 'conclave.db').resolve()}"

    def open_database(self, *, pool_size: int | None = None) -> Database:
        """The database these settings name, with their connection budget and pooler; a process
        that makes a statement or two (a start-up check, a CLI command) asks for a smaller pool."""
        size = self.database_pool_size if pool_size is None else pool_size
        return connect(self.effective_database_url, pool_size=size,
                       max_overflow=self.database_max_overflow if pool_size is None else 0,
                       pool_timeout=self.database_pool_timeout, pooler=self.database_pooler)

    def fleet_problem(self) -> str | None:
        """Why these settings cannot run a fleet worker (None when they can): a worker on
        an in-memory broker or a local SQLite file would start and never see the fleet's
        work."""
        missing = [name for name, value in (("CONCLAVE_BROKER_URL", self.broker_url),
                                            ("CONCLAVE_DATABASE_URL", self.database_url)) if not value]
        if not missing:
            return None
        return (f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set: a fleet worker needs the "
                "cluster's broker and database (`conclave run` runs a plan embedded, with no services)")

    @property
    def auth_required(self) -> bool:
        """Whether the API asks every /v1 request (and /metrics) for a token. Fails closed:
        only an explicit ``CONCLAVE_AUTH=off``, or embedded mode with no token set, opens it."""
        if self.auth is not None:
            return self.auth == "tokens"
        return not self.embedded or self.api_token is not None

    @property
    def heartbeat_seconds(self) -> float:
        return self.lease_seconds / 3

    @property
    def egress_policy(self) -> EgressPolicy:
        """Where plan-defined models may call (``CONCLAVE_ALLOWED_BASE_URLS``)."""
        return EgressPolicy.from_patterns(self.allowed_base_urls)

    @property
    def webhook_policy(self) -> EgressPolicy:
        """Where webhooks may be sent (``CONCLAVE_WEBHOOK_URLS``), under the same address rules."""
        return EgressPolicy.from_patterns(self.webhook_urls, setting="CONCLAVE_WEBHOOK_URLS")

    @property
    def webhook_key(self) -> bytes | None:
        """The operator's webhook key as bytes (a newline read from a file dropped); None: unset."""
        if self.webhook_secret_key is None:
            return None
        return self.webhook_secret_key.get_secret_value().strip().encode("utf-8")

    def environ(self) -> dict[str, str]:
        """The ``CONCLAVE_*`` environment that reproduces these settings in another
        process (lists as JSON, secrets revealed: hand it only to a child process)."""
        env: dict[str, str] = {}
        for name, value in self.model_dump().items():
            if value is None:
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            env[f"CONCLAVE_{name.upper()}"] = json.dumps(value) if isinstance(value, list | dict) else str(value)
        return env


def _pairs(value: str, what: str = "dollars") -> Any:
    """``tenant=value`` pairs, comma-separated, or a JSON object, as a dict; each tenant once."""
    text = value.strip()
    if text.startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a JSON object: {exc.msg}") from None
    pairs: dict[str, Any] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        tenant, sep, amount = part.partition("=")
        if not sep:
            raise ValueError(f"{part!r} is not tenant={what} (e.g. acme=50)")
        if tenant.strip() in pairs:
            raise ValueError(f"tenant {tenant.strip()!r} is given twice")
        pairs[tenant.strip()] = amount.strip()
    return pairs


def _dollars_by_tenant(value: Any, unit: str = "an amount of US dollars") -> dict[str, float]:
    """Tenant -> a positive, finite number (of US dollars); a wrong one names its tenant."""
    if not isinstance(value, dict):
        raise ValueError("must be tenant=value pairs (acme=50,beta=10) or a JSON object" if unit == "a number"
                         else "must be tenant=dollars pairs (acme=50,beta=10) or a JSON object")
    budgets: dict[str, float] = {}
    for tenant, amount in value.items():
        try:
            dollars = float(amount)
        except (TypeError, ValueError):
            raise ValueError(f"tenant {tenant!r}: {amount!r} is not {unit}") from None
        if isinstance(amount, bool) or not 0 < dollars < float("inf"):
            raise ValueError(f"tenant {tenant!r}: it must be {unit}, positive" if unit != "an amount of US dollars"
                             else f"tenant {tenant!r}: the budget must be a positive number of US dollars")
        budgets[check_tenant(str(tenant))] = dollars
    return budgets


def settings_errors(exc: ValidationError) -> list[str]:
    """One line per wrong setting, naming its variable: ``CONCLAVE_X: why``."""
    lines = []
    for e in exc.errors():
        message = str(e["msg"]).removeprefix("Value error, ")
        if not e["loc"]:  # a rule across settings: its message names the variables
            lines.append(message)
            continue
        name = "CONCLAVE_" + "_".join(str(part) for part in e["loc"][:1]).upper()
        lines.append(f"{name}: {message}")
    return lines
