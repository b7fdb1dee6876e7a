"""cairn: a durable session engine for AI agents.

The append-only log is the single source of truth; the context, the
application state, the status and the recovery verdict are pure functions of
it. This package is the Rust library's Python binding; see ``cairn.langgraph``
for the LangGraph checkpointer.

Thread safety: ``Store``, ``Session``, ``Operation`` and the tickets may be
shared between threads. A session's appends are serialized by the session;
calls release the GIL while they do I/O. One process (one handle) writes a
session at a time: a second writer gets ``SessionInUse``.
"""

from cairn._native import (
    FORMAT_VERSION,
    WRITER,
    AppendError,
    Appended,
    CairnError,
    ClosedError,
    DamagedError,
    EntryNotFound,
    InputError,
    InvalidEntry,
    ModelTicket,
    NewerFormatError,
    OpenError,
    Operation,
    PoisonedError,
    ReadError,
    ReadOnlyError,
    RecoveryError,
    Session,
    SessionExists,
    SessionInUse,
    SessionNotFound,
    Store,
    ToolTicket,
)

__all__ = [
    "FORMAT_VERSION",
    "WRITER",
    "AppendError",
    "Appended",
    "CairnError",
    "ClosedError",
    "DamagedError",
    "EntryNotFound",
    "InputError",
    "InvalidEntry",
    "ModelTicket",
    "NewerFormatError",
    "OpenError",
    "Operation",
    "PoisonedError",
    "ReadError",
    "ReadOnlyError",
    "RecoveryError",
    "Session",
    "SessionExists",
    "SessionInUse",
    "SessionNotFound",
    "Store",
    "ToolTicket",
]
