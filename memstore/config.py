"""Settings: one pydantic model, filled from ``MEMSTORE_*`` environment variables by ``from_env``.

>>> from memstore import Settings
>>> Settings(database_url="sqlite:///memstore.db", redis_url=None).window_size
60
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from memstore.errors import ConfigurationError, describe_validation_error

ENV_PREFIX = "MEMSTORE_"
MAX_TTL_SECONDS = 2**31 - 1
"""About 68 years: a TTL every cache (Redis, in-process) can represent."""
MAX_TEXT_BYTES_LIMIT = 2**30
"""1 GiB, the most PostgreSQL stores in one text value."""


class Settings(BaseModel):
    """Everything memstore can be configured with. Each field maps to ``MEMSTORE_<FIELD>``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    database_url: str = "sqlite:///memstore.db"
    """SQLAlchemy URL of the history database (the source of truth)."""
    redis_url: str | None = None
    """Redis URL of the memory windows; ``None`` keeps them in an in-process cache."""
    window_size: int = Field(default=60, ge=1, le=100_000)
    """Most messages a cached window keeps; adding more evicts from the front, group-safe."""
    window_max_tokens: int | None = Field(default=None, ge=1, le=2**40)
    """Token budget of the model's window (``memory(app).messages()``, ``load_window`` given
    neither bound, ``reload``'s report) by the store's token counter; ``None``: windows are
    bounded by messages only."""
    reload_max: int = Field(default=50, ge=1, le=100_000)
    """How many messages a rebuild (cache miss, ``reload``) loads from SQL."""
    cache_ttl_seconds: int = Field(default=3600, ge=1, le=MAX_TTL_SECONDS)
    """TTL of a window key, refreshed on every write."""
    worker_id: int | Literal["auto"] = "auto"
    """Snowflake worker id. ``auto``: lease a free id (0-1023) from the ``worker_leases``
    table of the database, renewed in the background; a number: that id, set by hand (give
    every process that writes to the same database its own)."""
    worker_lease_seconds: int = Field(default=60, ge=3, le=86_400)
    """Length of a worker-id lease (``worker_id`` ``auto``): a holder renews it every third
    of it; an id whose holder stopped renewing is free again this long after the last
    renewal, by the database's clock."""
    max_text_bytes: int = Field(default=1024 * 1024, ge=1, le=MAX_TEXT_BYTES_LIMIT)
    """Largest text, tool-result or arguments field accepted, in UTF-8 bytes."""
    max_metadata_bytes: int = Field(default=64 * 1024, ge=2)
    """Largest metadata of one message accepted, as compact JSON in UTF-8 bytes. Metadata is
    stored in every row and decoded in every window read, so it is kept far below the text
    limit; raise it only when you know why."""
    window_start_at_user: bool = False
    """Make every window start at a user message (Anthropic and Gemini need it)."""
    redis_timeout_seconds: float = Field(default=0.5, gt=0, le=3600)
    """Socket timeout for Redis calls; past it the call counts as a cache failure."""
    stale_window_max_seconds: float = Field(default=5, ge=0, le=3600)
    """With a Redis cache: how long any instance may go on serving a window that missed a
    committed write the writer could not apply to Redis (the writer stamps the app in SQL;
    every instance looks for stamps every half of this before serving a window). ``0``
    turns the stamps and the checks off (such a window then lives until its TTL)."""
    clock_backwards_max_wait_ms: int = Field(default=2000, ge=0, le=3_600_000)
    """How long the id generator waits out a clock that stepped back before failing."""
    guard_debug: bool = False
    """Log every loop-guard decision (``memstore.guard`` logger), message text redacted."""
    retention_days: int | None = Field(default=None, ge=1)
    """Default age limit of ``memstore prune`` when no ``--older-than``/``--keep-last`` is
    given (for a scheduled ``memstore prune --all --yes``); ``None``: no default."""

    @field_validator(
        "window_size",
        "window_max_tokens",
        "reload_max",
        "cache_ttl_seconds",
        "worker_id",
        "worker_lease_seconds",
        "max_text_bytes",
        "clock_backwards_max_wait_ms",
        mode="before",
    )
    @classmethod
    def _no_bool_for_int(cls, value: object) -> object:
        if isinstance(value, bool):
            raise ValueError("must be an integer, not a bool")
        return value

    @field_validator("worker_id", mode="before")
    @classmethod
    def _auto_worker_id(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        return value

    @field_validator("worker_id")
    @classmethod
    def _worker_id_range(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 0 <= value <= 1023:
            raise ValueError("must be auto or an integer in 0..1023")
        return value

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str) -> str:
        try:
            url = make_url(value)
        except ArgumentError as error:
            raise ValueError(f"not a database URL: {value!r}") from error
        backend = url.get_backend_name()
        if backend not in ("sqlite", "postgresql", "mysql", "mariadb"):
            raise ValueError(f"unsupported database {backend!r}: use sqlite, postgresql or mysql")
        return value

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"not a Redis URL (redis://, rediss:// or unix://): {value!r}")
        return value

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            details = describe_validation_error(error)
            raise ConfigurationError(f"invalid memstore settings: {details}") from error

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read every ``MEMSTORE_<FIELD>`` variable that is set; ``overrides`` win over them."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is not None and raw.strip() != "":
                values[name] = _coerce(name, raw.strip())
        values.update(overrides)
        return cls(**values)


def _coerce(name: str, raw: str) -> Any:
    annotation = Settings.model_fields[name].annotation
    if name == "worker_id":
        if raw.lower() == "auto":
            return "auto"
        try:
            return int(raw)
        except ValueError as error:
            raise ConfigurationError(
                f"{ENV_PREFIX}WORKER_ID must be auto or an integer in 0..1023"
            ) from error
    if annotation is int:
        try:
            return int(raw)
        except ValueError as error:
            raise ConfigurationError(f"{ENV_PREFIX}{name.upper()} must be an integer") from error
    if annotation is float:
        try:
            return float(raw)
        except ValueError as error:
            raise ConfigurationError(f"{ENV_PREFIX}{name.upper()} must be a number") from error
    if annotation is bool:
        lowered = raw.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigurationError(f"{ENV_PREFIX}{name.upper()} must be true or false")
    return raw
