"""memstore: chat memory for tool-calling LLM agents that survives restarts.

Two tables (display history and full original history, ordered by snowflake ids), a cached
memory window per app, and a loader whose edge check keeps tool requests and their results
together, so the window is always one OpenAI, Anthropic and LangChain4j accept.
"""

from memstore._version import __version__
from memstore.collector import TurnCollector
from memstore.config import Settings
from memstore.errors import (
    ClockMovedBackwardsError,
    CommitOutcomeUnknownError,
    CompactionConflictError,
    ConfigurationError,
    DecryptionError,
    EncryptionError,
    FormatConversionError,
    ImportRecordError,
    IncompleteToolCallError,
    InvalidAppIdError,
    InvalidInputError,
    InvalidMessageError,
    InvalidRetentionError,
    MemstoreError,
    MessageTooLargeError,
    MissingExtraError,
    SchemaError,
    StorageError,
    StreamProtocolError,
    SummarizerError,
    UnknownKeyError,
    UnknownToolCallError,
    WorkerIdsExhaustedError,
    WorkerLeaseError,
    WorkerLeaseLostError,
)
from memstore.messages import (
    AiMessage,
    Message,
    Reasoning,
    SystemMessage,
    ToolRequest,
    ToolResult,
    UserMessage,
)
from memstore.reports import (
    CompactionReport,
    DisplayEntry,
    HealthCheck,
    HealthReport,
    ImportCounts,
    ImportReport,
    PruneReport,
    PurgeReport,
    RekeyReport,
    RekeyTableCounts,
    ReloadReport,
)
from memstore.store import ChatMemory, MemoryStore


def __getattr__(name: str) -> object:
    # The async store loads SQLAlchemy's asyncio layer (greenlet: the ``async`` extra) only when
    # asked for; without it this raises MissingExtraError.
    if name == "AsyncMemoryStore":
        from memstore.aio import AsyncMemoryStore

        return AsyncMemoryStore
    raise AttributeError(f"module 'memstore' has no attribute {name!r}")


__all__ = [
    "AiMessage",
    "AsyncMemoryStore",
    "ChatMemory",
    "ClockMovedBackwardsError",
    "CommitOutcomeUnknownError",
    "CompactionConflictError",
    "CompactionReport",
    "ConfigurationError",
    "DecryptionError",
    "DisplayEntry",
    "EncryptionError",
    "FormatConversionError",
    "HealthCheck",
    "HealthReport",
    "ImportCounts",
    "ImportRecordError",
    "ImportReport",
    "IncompleteToolCallError",
    "InvalidAppIdError",
    "InvalidInputError",
    "InvalidMessageError",
    "InvalidRetentionError",
    "MemoryStore",
    "MemstoreError",
    "Message",
    "MessageTooLargeError",
    "MissingExtraError",
    "PruneReport",
    "PurgeReport",
    "Reasoning",
    "RekeyReport",
    "RekeyTableCounts",
    "ReloadReport",
    "SchemaError",
    "Settings",
    "StorageError",
    "StreamProtocolError",
    "SummarizerError",
    "SystemMessage",
    "ToolRequest",
    "ToolResult",
    "TurnCollector",
    "UnknownKeyError",
    "UnknownToolCallError",
    "UserMessage",
    "WorkerIdsExhaustedError",
    "WorkerLeaseError",
    "WorkerLeaseLostError",
    "__version__",
]
