"""Configuration: one typed object, read from ``CONCLAVE_*`` environment variables by
entry points (CLI, API, worker) and passed down. No module reads the environment.

With neither ``CONCLAVE_BROKER_URL`` nor ``CONCLAVE_DATABASE_URL`` set, Conclave
runs *embedded*: a SQLite file under ``CONCLAVE_HOME`` and an in-process worker on
kombu's in-memory transport (a real Celery worker, not eager mode).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CONCLAVE_", extra="ignore")

    database_url: str | None = Field(None, description="SQLAlchemy URL; Postgres in a cluster")
    broker_url: str | None = Field(None, description="Celery broker, e.g. redis://127.0.0.1:6379/0")
    result_backend: str | None = Field(None, description="Celery result backend (chords); default: the Redis broker")
    redis_url: str | None = Field(None, description="Redis for live streams (pub/sub); default: the Redis broker")
    home: Path = Field(Path(".conclave"), description="Where embedded mode keeps its SQLite file")

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
    retention_days: float = Field(30.0, gt=0, description="Finished plans' events older than this are pruned")
    max_events_per_plan: int = Field(5000, ge=100, description="Events kept per finished plan")

    briefing_max_documents: int = Field(100, ge=1, description="Most documents in one plan's briefing")
    briefing_max_document_bytes: int = Field(
        200_000, ge=1000, description="Largest briefing document (UTF-8 bytes); larger local files are skipped")
    briefing_max_bytes: int = Field(800_000, ge=1000, description="All of one plan's briefing documents together")
    briefing_max_chunks: int = Field(2000, ge=1, description="Most chunks one plan's briefing may be split into")
    briefing_rerank: bool = Field(
        True, description="Rerank retrieved passages with an embedding model when `conclave[rerank]` is installed")

    default_provider: str = Field("offline", description="Provider for models a plan does not configure")
    first_chunk_timeout: float = Field(30.0, gt=0, description="Stream guard: wait for the first chunk (s)")
    idle_timeout: float = Field(30.0, gt=0, description="Stream guard: longest gap between chunks (s)")
    call_deadline: float = Field(300.0, gt=0, description="Stream guard: overall deadline of a call (s)")
    max_output_tokens: int = Field(1024, ge=16, description="Default output reserve per call")
    context_window: int = Field(32768, ge=512, description="Default model context window (tokens)")
    offline_latency: float = Field(0.02, ge=0, description="Offline provider: seconds between chunks")

    log_level: str = Field("INFO", description="Log level of entry points")
    api_token: SecretStr | None = Field(
        None, description="If set, every /v1 HTTP route requires `Authorization: Bearer <token>`")

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

    @property
    def heartbeat_seconds(self) -> float:
        return self.lease_seconds / 3
