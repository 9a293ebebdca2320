"""Every error the toolkit raises derives from :class:`IngestError`.

Hierarchy::

    IngestError
    ├── ConfigError                    bad configuration (terminal: fix the config)
    ├── CurationError                  a curated hour cannot be built (nothing of the curated table changed)
    │   └── ContractViolation          a batch changes what the curated table's contract freezes
    ├── TransientError                 retrying later can succeed
    │   ├── ChannelFullError           capacity reached
    │   └── DiskSpaceError             free space below the configured minimum, or ENOSPC
    └── ChannelError                   terminal for the call that raised it
        ├── ChannelLockedError         another process owns the channel directories
        ├── ChannelClosedError         the channel was closed
        ├── ChannelFailedError         an I/O error left the on-disk state unknown: reopen
        ├── TransactionError           misuse of a transaction (wrong kind, closed, nested)
        │   └── TransactionCapacityError
        ├── EventTooLargeError         one event exceeds ``max_event_size``
        ├── CorruptLogError            a log record failed validation (carries path + offset)
        │   ├── SegmentLostError       a segment proven written lost its header or its frames
        │   └── TailRefusedError       recovery_mode refuses the newest segment's torn or damaged tail
        ├── CheckpointInvalid          a checkpoint file cannot be used (carries path + reason)
        ├── LogReadError               the OS failed to read a log segment (EIO); nothing was taken
        ├── ChannelIdentityError       data and checkpoint dirs belong to different channels
        └── EncryptionKeyError         a segment's key is not configured, or is not the key it was written with

Each stage keeps its own errors in one module, under the same root::

    IngestError
    ├── ConfigError
    │   └── WrongAgentError                collect.errors: the agent that answers is not the configuration's
    ├── AdminRequestError                  collect.errors: an agent's admin endpoint did not answer, or refused
    ├── ChannelError
    │   ├── TransactionError
    │   │   ├── InvalidTagError            channel.tags: a tag or batch id breaks the tag rules
    │   │   └── LeaseExpiredError          rpc.errors (also an RpcError): a remote take outlived its lease
    │   ├── ChannelLockedError
    │   │   ├── ChannelInUseError          channel.tools.common: a tool needs the channel offline
    │   │   └── AgentLockedError           collect.errors: another agent holds the agent's state
    │   ├── ToolError                      channel.tools.common: an operator tool cannot go on
    │   └── IncidentsUnreadable            channel.incidents: incidents.json is damaged
    ├── BadRequestError                    collect.errors: a client's body is malformed (HTTP 400)
    ├── UnsupportedMediaTypeError          collect.errors: HTTP 415
    ├── BatchIdError                       collect.errors: a batch id is invalid
    ├── OversizedLineError                 collect.errors: a line above max_line_bytes
    ├── RefusedFileError                   collect.errors: a spool file that escapes or is unsafe
    ├── SourceStateError                   collect.errors: a source's saved state is unusable
    ├── RpcError                           rpc.errors: what the agent's API answers
    │   ├── AgentUnavailableError          (also a TransientError) the agent cannot be reached
    │   ├── AuthenticationError            missing or wrong token
    │   ├── ForwardedChannelError          a take from a channel a sink group of the agent empties
    │   ├── InvalidRequestError            a request field out of range (named)
    │   ├── RequestTooLargeError           above the message size limit
    │   ├── UnknownChannelError            no such channel on that agent
    │   └── RemoteError                    any other failure on the agent's side
    ├── LandingError                       land.errors: a landing run failed (the take rolled back)
    │   └── CommitConflict                 another landing committed some of the same events
    ├── SparkStartError                    land.errors: no usable Java or Spark
    ├── PreflightError                     land.errors: a check before the first take failed (nothing taken)
    ├── TransientError
    │   └── MaintenanceConflict            land.errors: a table's compaction kept losing to landings' commits
    ├── AgentUnreachable                   orchestrate.remote: an agent did not serve a channel's state
    ├── HadoopJarsError                    hdfs.jars: the Hadoop jars are missing
    ├── HdfsClusterError                   hdfs.cluster: the local HDFS did not start or answer
    ├── MissingExtraError                  extras: a command needs an extra that is not installed
    ├── CheckFailedError                   airflow.operators: an ERROR check failed its task (no retry)
    └── DemoError                          dagster_defs.demo_steps: the demo cannot run here

Three exceptions are signals, not errors, and never reach a caller: ``channel.format.FrameError``
(why a frame header is invalid; every reader turns it into a CorruptLogError naming the file and
offset), ``collect.sources.base.SourceStopped`` (a source's loop ends) and ``rpc.ordered.ItemFailed``
(which request of an ordered stream failed; the agent turns it into that request's error status).
``tests/test_error_tree.py`` keeps this picture and the code in step.

Callers decide what to retry with ``isinstance(err, TransientError)``. Every message says
what happened *and* what to do about it.
"""

from __future__ import annotations

__all__ = [
    "ChannelClosedError",
    "ChannelError",
    "ChannelFailedError",
    "ChannelFullError",
    "ChannelIdentityError",
    "ChannelLockedError",
    "CheckpointInvalid",
    "ConfigError",
    "ContractViolation",
    "CorruptLogError",
    "CurationError",
    "TailRefusedError",
    "DiskSpaceError",
    "EncryptionKeyError",
    "EventTooLargeError",
    "IngestError",
    "LogReadError",
    "SegmentLostError",
    "TransactionCapacityError",
    "TransactionError",
    "TransientError",
]


class IngestError(Exception):
    """Root of every error raised by ingest-toolkit."""


class ConfigError(IngestError):
    """A configuration value is missing or invalid; ``key`` names it."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class TransientError(IngestError):
    """The operation may succeed if retried later; nothing committed was affected."""


class ChannelFullError(TransientError):
    def __init__(self, *, capacity: int, used: int, requested: int) -> None:
        super().__init__(
            f"channel full: {used} of {capacity} slots in use, {requested} more requested; "
            "retry after the channel has been drained, or raise 'capacity'"
        )
        self.capacity, self.used, self.requested = capacity, used, requested


class DiskSpaceError(TransientError):
    """``queued``: events in the channel when the write was refused (None: unknown). Draining
    frees space only when there is something to drain, so the advice depends on it."""

    def __init__(self, *, path: str, free_bytes: int, needed_bytes: int, min_free_bytes: int,
                 queued: int | None = None) -> None:
        if queued == 0:
            advice = ("The channel is empty, so draining it frees nothing: free space on that volume (other "
                      "files), move data_dirs to a larger one, or lower min_free_bytes, then retry")
        else:
            advice = ("Free space on that volume, or drain the channel (takes keep working; drained segments "
                      "are deleted at the next checkpoint), then retry")
        super().__init__(
            f"not enough disk space in {path}: {free_bytes} bytes free, {needed_bytes} needed "
            f"and {min_free_bytes} must stay free (min_free_bytes); nothing was written. {advice}"
        )
        self.path, self.free_bytes = path, free_bytes
        self.needed_bytes, self.min_free_bytes, self.queued = needed_bytes, min_free_bytes, queued


class ChannelError(IngestError):
    """A channel operation failed in a way retrying the same call will not fix."""


class ChannelLockedError(ChannelError):
    def __init__(self, *, path: str, holder: str) -> None:
        super().__init__(
            f"channel directory {path} is locked by another process ({holder}); "
            "stop that process, or reach the channel through its agent"
        )
        self.path, self.holder = path, holder


class ChannelClosedError(ChannelError):
    def __init__(self) -> None:
        super().__init__("channel is closed; open a new FileChannel on the same directories")


class ChannelFailedError(ChannelError):
    def __init__(self, cause: BaseException) -> None:
        super().__init__(
            f"channel stopped after an I/O error it cannot recover from in place ({cause!r}); "
            "the outcome of commits in progress is unknown. Close it and open it again: "
            "recovery rebuilds the state from what is on disk"
        )
        self.cause = cause


class TransactionError(ChannelError):
    """A transaction was used against its contract."""


class TransactionCapacityError(TransactionError):
    def __init__(self, *, capacity: int, requested: int) -> None:
        super().__init__(
            f"transaction would hold {requested} events, transaction_capacity is {capacity}; "
            "use smaller batches or raise 'transaction_capacity'"
        )
        self.capacity, self.requested = capacity, requested


class EventTooLargeError(ChannelError):
    def __init__(self, *, size: int, limit: int) -> None:
        super().__init__(
            f"event of {size} encoded bytes exceeds max_event_size={limit}; "
            "split the event or raise 'max_event_size' (at most a quarter of max_file_size)"
        )
        self.size, self.limit = size, limit


class CorruptLogError(ChannelError):
    def __init__(self, *, path: str, offset: int, reason: str) -> None:
        super().__init__(
            f"corrupt log record in {path} at byte offset {offset}: {reason}. Nothing was "
            "skipped. Inspect it with 'ingest-toolkit channel inspect' and, once the cause is "
            "understood, quarantine it with 'ingest-toolkit channel repair' (keeps a backup)"
        )
        self.path, self.offset, self.reason = path, offset, reason


class SegmentLostError(CorruptLogError):
    """A segment the channel's own files prove was written (``proof`` says how) came back empty,
    shorter than its header or with a zeroed header: damage, not an interrupted creation."""

    def __init__(self, *, path: str, damage: str, proof: str) -> None:
        ChannelError.__init__(
            self, f"{path} {damage}, but {proof}: it was written, so this is damage (a lost inode, a bad "
                  "restore), not an interrupted creation. Nothing was changed. Restore the file from a "
                  "backup, or run 'ingest-toolkit channel repair --dry-run' with this channel's "
                  "--checkpoint-dir and --data-dir to see what removing its frames would lose")
        self.path, self.offset, self.reason, self.proof = path, 0, damage, proof


class TailRefusedError(CorruptLogError):
    """The newest segment ends in bytes that recovery would have to cut, and ``recovery_mode``
    refuses to: damage to a frame written whole (``torn`` False: acknowledged commits may be in
    it), or a torn write in ``strict`` mode. ``events`` / ``transactions``: what the cut would
    drop (puts without a COMMIT before it)."""

    def __init__(self, *, path: str, offset: int, reason: str, torn: bool, events: int, transactions: int,
                 mode: str) -> None:
        what = ("a torn write: a crash interrupted it, and none of its commits was acknowledged under fsync" if torn
                else "damage: a frame written whole fails its checks, so acknowledged commits may be in it")
        txns = f"{transactions} transaction{'s' if transactions != 1 else ''}"
        ChannelError.__init__(
            self, f"{path} ends at byte offset {offset} in {what} ({reason}). Cutting it would drop {events} events "
                  f"of {txns} without a COMMIT before it, and recovery_mode = \"{mode}\" refuses to cut. Nothing was "
                  "changed. See what would be cut with 'ingest-toolkit channel repair --dry-run', or open once with "
                  f"recovery_mode = \"{'torn_tail' if torn else 'set_aside'}\" to keep a copy of the tail, cut it "
                  "and record an incident (docs/durability.md, \"Recovery modes\")")
        self.path, self.offset, self.reason = path, offset, reason
        self.torn, self.events, self.transactions, self.mode = torn, events, transactions, mode


class CheckpointInvalid(ChannelError):
    """The checkpoint cannot be used; ``path`` and ``reason`` say why. Recovery falls back to a
    full replay of the logs, which is exact."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


class LogReadError(ChannelError):
    def __init__(self, *, path: str, cause: OSError) -> None:
        super().__init__(
            f"reading {path} failed ({cause}); the events stay at the head of the queue. Check the "
            "disk (dmesg, SMART); if the file is damaged, 'ingest-toolkit channel verify' locates it")
        self.path, self.cause = path, cause


class ChannelIdentityError(ChannelError):
    def __init__(self, message: str) -> None:
        super().__init__(message)


class EncryptionKeyError(ChannelError):
    """A log segment cannot be read with the configured keys: its key id is not configured, or
    the key configured under that id is not the one it was written with. Raised before anything
    on disk changes. ``setting`` names what to fix."""

    def __init__(self, *, path: str, key_id: int, problem: str, setting: str) -> None:
        super().__init__(f"{path} was encrypted with key id {key_id}, {problem}: fix {setting}; nothing was "
                         "changed on disk")
        self.path, self.key_id, self.problem, self.setting = path, key_id, problem, setting


class CurationError(IngestError):
    """A curated partition cannot be built from what the landed table holds (the message says why
    and what to do); nothing of the curated table changed."""


class ContractViolation(CurationError):
    """A batch changes what the curated table's contract freezes: a new field, or a value of
    another type than its column's. The message names the field (or column) and an event id."""
