"""Every error of the collect stage (the agent, its pipelines and sources), in one module.

Hierarchy (the roots are in :mod:`ingest_toolkit.errors`)::

    IngestError
    ├── BatchIdError (also ValueError)       a client batch id that cannot be a commit tag (HTTP 400)
    ├── BadRequestError                      a malformed HTTP request body (HTTP 400)
    ├── UnsupportedMediaTypeError            an HTTP Content-Type no parser reads (HTTP 415)
    ├── OversizedLineError                   a line over max_event_bytes with oversized = "fail"
    ├── RefusedFileError                     a spooled/tailed file that must not be read (symlink, ...)
    ├── SourceStateError                     a source's position file is unreadable
    ├── AdminRequestError                    the agent's admin endpoint did not answer, or refused (its HTTP status)
    ├── ConfigError
    │   └── WrongAgentError                  the agent that answers is not the one the configuration describes
    └── ChannelError
        └── ChannelLockedError
            └── AgentLockedError             another agent runs with the same state_dir

Errors of the gRPC API the agent serves are in :mod:`ingest_toolkit.rpc.errors`.
"""

from __future__ import annotations

from ..errors import ChannelLockedError, ConfigError, IngestError

__all__ = ["AdminRequestError", "AgentLockedError", "BadRequestError", "BatchIdError", "OversizedLineError",
           "RefusedFileError", "SourceStateError", "UnsupportedMediaTypeError", "WrongAgentError"]


class BatchIdError(IngestError, ValueError):
    """A batch id that cannot be a channel commit tag (empty, or over 128 bytes of UTF-8)."""


class BadRequestError(IngestError):
    """Malformed request body (HTTP 400); the message says where and what."""


class UnsupportedMediaTypeError(IngestError):
    """A Content-Type this source does not read (HTTP 415)."""


class OversizedLineError(IngestError):
    def __init__(self, *, offset: int, limit: int) -> None:
        super().__init__(f"line starting at byte offset {offset} is longer than max_event_bytes={limit}; "
                         "raise max_event_bytes or choose oversized = 'truncate' or 'split'")
        self.offset, self.limit = offset, limit


class RefusedFileError(IngestError):
    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"refusing {name!r}: {reason}")
        self.name, self.reason = name, reason


class SourceStateError(IngestError):
    """A source's durable position file cannot be read; starting over would duplicate data."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"position file {path} is unreadable ({reason}); the source will not guess "
                         "where it was. Restore it, or delete it to re-read every input from the start "
                         "(events already stored are then stored again)")
        self.path = path


class AgentLockedError(ChannelLockedError):
    """Another agent runs with the same ``state_dir`` (its source positions would be shared)."""

    def __init__(self, *, path: str, holder: str) -> None:
        super().__init__(path=path, holder=holder)
        self.args = (f"agent state directory {path} is in use by another agent ({holder}); stop it, "
                     "or give this agent its own [agent] state_dir",)


class WrongAgentError(ConfigError):
    """The agent that answers is not the one the configuration describes (:mod:`.locate`): it
    serves a channel of the configuration under another id, or not at all. Nothing was sent or
    taken. ``channel``, ``expected`` (the id in ``channel.id``), ``served`` (None: no such channel)."""

    def __init__(self, message: str, *, channel: str, expected: str, served: str | None) -> None:
        super().__init__(message, key="conf")
        self.channel, self.expected, self.served = channel, expected, served


class AdminRequestError(IngestError):
    """A request to an agent's admin endpoint failed: ``status`` is the HTTP status of a refusal
    (401: the token; 404: an unknown path or channel), None when nothing answered; ``text`` is the
    agent's ``error`` (or the connection's reason)."""

    def __init__(self, message: str, *, url: str, status: int | None, text: str) -> None:
        super().__init__(message)
        self.url, self.status, self.text = url, status, text
