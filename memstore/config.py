"""Settings: one pydantic model, filled from ``MEMSTORE_*`` environment variables by ``from_env``.

>>> from memstore import Settings
>>> Settings(database_url="sqlite:///memstore.db", redis_url=None).window_size
60
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_serializer,
    field_validator,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from memstore.core.crypto import EncryptionKey, parse_keys
from memstore.core.redis_url import parse_redis_url
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
    """Redis URL of the memory windows (``redis://``, ``rediss://``, ``unix://``,
    ``redis+cluster://h:p[,h:p...]``, ``redis+sentinel://h:p[,h:p...]/MASTER[/db]``, or the
    ``rediss+`` TLS forms); ``None`` keeps them in an in-process cache."""
    window_size: int = Field(default=60, ge=1, le=100_000)
    """Most messages a cached window keeps; adding more evicts from the front, group-safe."""
    window_max_tokens: int | None = Field(default=None, ge=1, le=2**40)
    """Token budget of the model's window (``memory(app).messages()``, ``load_window`` given
    neither bound, ``reload``'s report) by the store's token counter; ``None``: windows are
    bounded by messages only."""
    summary_role: Literal["system", "user", "exclude"] = "system"
    """How a compaction's summary opens a window: as a ``system`` message, a ``user``
    message, or not at all (``exclude``: the window still starts after the covered range)."""
    compact_at_tokens: int | None = Field(default=None, ge=1, le=2**40)
    """Automatic compaction: when an append leaves the app's window above this many tokens
    and the store has a summarizer (``set_summarizer``), compact it, keeping the newest
    units of up to half this many tokens; ``None``: only explicit ``compact`` calls."""
    reload_max: int = Field(default=50, ge=1, le=100_000)
    """How many messages a rebuild (cache miss, ``reload``) loads from SQL."""
    cache_ttl_seconds: int = Field(default=3600, ge=1, le=MAX_TTL_SECONDS)
    """TTL of a window key, refreshed on every write."""
    decoded_rows_cache_mb: int = Field(default=32, ge=0, le=1024 * 1024)
    """Memory (MiB, estimated) for decoded history rows kept in this process, so reading an
    app's window from SQL again decodes only the rows it had not decoded before (a row is
    reused only while its stored payload is unchanged). ``0`` turns it off."""
    async_sqlite_inline_reads: bool = True
    """:class:`~memstore.aio.AsyncMemoryStore` on a SQLite file: run a window read on the
    calling thread when it can take its locks at once (it never waits there; a read that
    would wait goes to aiosqlite's thread). ``False``: every read goes to aiosqlite's thread."""
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
    otel_metrics: bool = False
    """Export every store's counters to OpenTelemetry (``store.enable_otel()`` at creation,
    the global meter provider); needs the ``otel`` extra."""
    retention_days: int | None = Field(default=None, ge=1)
    """Default age limit of ``memstore prune`` when no ``--older-than``/``--keep-last`` is
    given (for a scheduled ``memstore prune --all --yes``); ``None``: no default."""
    encryption_keys: tuple[EncryptionKey, ...] = ()
    """Encryption at rest: ``KEY_ID:BASE64KEY`` entries (a 256-bit key in standard base64
    each), comma-separated; the first seals every new value, all of them open stored ones.
    Empty: nothing is encrypted. Needs the ``crypto`` extra. Never shown in errors or ``repr``."""
    encrypt_cache: bool = True
    """With ``encryption_keys``: also seal the messages of cached Redis windows (the
    in-process cache keeps plain objects in memory either way)."""

    @field_validator(
        "window_size",
        "window_max_tokens",
        "compact_at_tokens",
        "reload_max",
        "cache_ttl_seconds",
        "decoded_rows_cache_mb",
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

    @field_validator("encryption_keys", mode="before")
    @classmethod
    def _parse_encryption_keys(cls, value: object) -> object:
        return parse_keys(value)

    @field_serializer("encryption_keys")
    def _key_ids_only(self, keys: tuple[EncryptionKey, ...]) -> list[str]:
        """``model_dump()`` and JSON show the key ids, never key material."""
        return [key.key_id for key in keys]

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str) -> str:
        try:
            url = make_url(value)
        except (ArgumentError, ValueError) as error:
            # never the URL itself: it may carry a password
            raise ValueError(f"not a database URL ({type(error).__name__})") from None
        backend = url.get_backend_name()
        if backend not in ("sqlite", "postgresql", "mysql", "mariadb"):
            raise ValueError(f"unsupported database {backend!r}: use sqlite, postgresql or mysql")
        return value

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        parse_redis_url(value)  # a ValueError names the accepted forms (never the password)
        return value

    def __init__(self, **data: Any) -> None:
        details = None
        try:
            super().__init__(**data)
        except ValidationError as error:
            details = describe_validation_error(error)
        if details is not None:
            # raised outside the handler: the validation error quotes its input values (URLs
            # with passwords), so it must not travel as this error's context
            raise ConfigurationError(f"invalid memstore settings: {details}")

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, redact_url(value) if name in _URL_FIELDS and value else value

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


_URL_FIELDS = frozenset({"database_url", "redis_url"})
_URL_PASSWORD = re.compile(r"(?P<user>//[^/@]*?:)[^@/]*@")


def redact_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (for messages and reprs)."""
    return _URL_PASSWORD.sub(r"\g<user>***@", url)


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
