from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TxnKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TXN_KIND_UNSPECIFIED: _ClassVar[TxnKind]
    TXN_KIND_PUT: _ClassVar[TxnKind]
    TXN_KIND_TAKE: _ClassVar[TxnKind]
TXN_KIND_UNSPECIFIED: TxnKind
TXN_KIND_PUT: TxnKind
TXN_KIND_TAKE: TxnKind

class Put(_message.Message):
    __slots__ = ("body", "headers")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BODY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    headers: _containers.ScalarMap[str, str]
    def __init__(self, body: _Optional[bytes] = ..., headers: _Optional[_Mapping[str, str]] = ...) -> None: ...

class HeaderEntries(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[HeaderEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[HeaderEntry, _Mapping]]] = ...) -> None: ...

class HeaderEntry(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class RawEntries(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, entries: _Optional[_Iterable[bytes]] = ...) -> None: ...

class KeysValues(_message.Message):
    __slots__ = ("keys", "values")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, keys: _Optional[_Iterable[str]] = ..., values: _Optional[_Iterable[str]] = ...) -> None: ...

class Take(_message.Message):
    __slots__ = ("pointers",)
    POINTERS_FIELD_NUMBER: _ClassVar[int]
    pointers: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, pointers: _Optional[_Iterable[int]] = ...) -> None: ...

class Commit(_message.Message):
    __slots__ = ("kind", "count", "tag", "first_seq", "commit_unix_ns")
    KIND_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    COMMIT_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    kind: TxnKind
    count: int
    tag: str
    first_seq: int
    commit_unix_ns: int
    def __init__(self, kind: _Optional[_Union[TxnKind, str]] = ..., count: _Optional[int] = ..., tag: _Optional[str] = ..., first_seq: _Optional[int] = ..., commit_unix_ns: _Optional[int] = ...) -> None: ...

class Rollback(_message.Message):
    __slots__ = ("kind",)
    KIND_FIELD_NUMBER: _ClassVar[int]
    kind: TxnKind
    def __init__(self, kind: _Optional[_Union[TxnKind, str]] = ...) -> None: ...

class Noop(_message.Message):
    __slots__ = ("reason", "replaced_bytes", "repaired_unix_ns")
    REASON_FIELD_NUMBER: _ClassVar[int]
    REPLACED_BYTES_FIELD_NUMBER: _ClassVar[int]
    REPAIRED_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    reason: str
    replaced_bytes: int
    repaired_unix_ns: int
    def __init__(self, reason: _Optional[str] = ..., replaced_bytes: _Optional[int] = ..., repaired_unix_ns: _Optional[int] = ...) -> None: ...

class SegmentMeta(_message.Message):
    __slots__ = ("format_version", "log_id", "channel_id", "data_end", "frames", "first_seq", "last_seq", "sealed_unix_ns")
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    LOG_ID_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_END_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    SEALED_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    format_version: int
    log_id: int
    channel_id: bytes
    data_end: int
    frames: int
    first_seq: int
    last_seq: int
    sealed_unix_ns: int
    def __init__(self, format_version: _Optional[int] = ..., log_id: _Optional[int] = ..., channel_id: _Optional[bytes] = ..., data_end: _Optional[int] = ..., frames: _Optional[int] = ..., first_seq: _Optional[int] = ..., last_seq: _Optional[int] = ..., sealed_unix_ns: _Optional[int] = ...) -> None: ...

class CheckpointMeta(_message.Message):
    __slots__ = ("format_version", "channel_id", "checkpoint_id", "last_seq", "queue_size", "queue_head", "log_refcounts", "written_unix_ns", "log_id", "log_offset", "next_txn_id", "queue_file", "queue_bytes", "queue_crc32c", "inflight_file", "inflight_bytes", "inflight_crc32c", "inflight_takes", "inflight_puts", "capacity", "checkpoint_interval_ms", "oldest_commit_unix_ns", "puts_committed", "takes_committed", "log_bytes", "backup_checkpoint_id", "backup_dir")
    class LogRefcountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    QUEUE_SIZE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_HEAD_FIELD_NUMBER: _ClassVar[int]
    LOG_REFCOUNTS_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    LOG_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_TXN_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FILE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_BYTES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_CRC32C_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_FILE_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_BYTES_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_CRC32C_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_TAKES_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_PUTS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    OLDEST_COMMIT_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    PUTS_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    TAKES_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    LOG_BYTES_FIELD_NUMBER: _ClassVar[int]
    BACKUP_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    BACKUP_DIR_FIELD_NUMBER: _ClassVar[int]
    format_version: int
    channel_id: bytes
    checkpoint_id: int
    last_seq: int
    queue_size: int
    queue_head: int
    log_refcounts: _containers.ScalarMap[int, int]
    written_unix_ns: int
    log_id: int
    log_offset: int
    next_txn_id: int
    queue_file: str
    queue_bytes: int
    queue_crc32c: int
    inflight_file: str
    inflight_bytes: int
    inflight_crc32c: int
    inflight_takes: int
    inflight_puts: int
    capacity: int
    checkpoint_interval_ms: int
    oldest_commit_unix_ns: int
    puts_committed: int
    takes_committed: int
    log_bytes: int
    backup_checkpoint_id: int
    backup_dir: str
    def __init__(self, format_version: _Optional[int] = ..., channel_id: _Optional[bytes] = ..., checkpoint_id: _Optional[int] = ..., last_seq: _Optional[int] = ..., queue_size: _Optional[int] = ..., queue_head: _Optional[int] = ..., log_refcounts: _Optional[_Mapping[int, int]] = ..., written_unix_ns: _Optional[int] = ..., log_id: _Optional[int] = ..., log_offset: _Optional[int] = ..., next_txn_id: _Optional[int] = ..., queue_file: _Optional[str] = ..., queue_bytes: _Optional[int] = ..., queue_crc32c: _Optional[int] = ..., inflight_file: _Optional[str] = ..., inflight_bytes: _Optional[int] = ..., inflight_crc32c: _Optional[int] = ..., inflight_takes: _Optional[int] = ..., inflight_puts: _Optional[int] = ..., capacity: _Optional[int] = ..., checkpoint_interval_ms: _Optional[int] = ..., oldest_commit_unix_ns: _Optional[int] = ..., puts_committed: _Optional[int] = ..., takes_committed: _Optional[int] = ..., log_bytes: _Optional[int] = ..., backup_checkpoint_id: _Optional[int] = ..., backup_dir: _Optional[str] = ...) -> None: ...

class InflightTxn(_message.Message):
    __slots__ = ("txn_id", "pointers")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    POINTERS_FIELD_NUMBER: _ClassVar[int]
    txn_id: int
    pointers: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, txn_id: _Optional[int] = ..., pointers: _Optional[_Iterable[int]] = ...) -> None: ...

class CommitMark(_message.Message):
    __slots__ = ("end", "unix_ns")
    END_FIELD_NUMBER: _ClassVar[int]
    UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    end: int
    unix_ns: int
    def __init__(self, end: _Optional[int] = ..., unix_ns: _Optional[int] = ...) -> None: ...

class CommitTag(_message.Message):
    __slots__ = ("tag", "first_seq", "count", "commit_unix_ns")
    TAG_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    COMMIT_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    tag: str
    first_seq: int
    count: int
    commit_unix_ns: int
    def __init__(self, tag: _Optional[str] = ..., first_seq: _Optional[int] = ..., count: _Optional[int] = ..., commit_unix_ns: _Optional[int] = ...) -> None: ...

class Inflight(_message.Message):
    __slots__ = ("checkpoint_id", "takes", "puts", "commit_marks", "tags")
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    TAKES_FIELD_NUMBER: _ClassVar[int]
    PUTS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_MARKS_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: int
    takes: _containers.RepeatedCompositeFieldContainer[InflightTxn]
    puts: _containers.RepeatedCompositeFieldContainer[InflightTxn]
    commit_marks: _containers.RepeatedCompositeFieldContainer[CommitMark]
    tags: _containers.RepeatedCompositeFieldContainer[CommitTag]
    def __init__(self, checkpoint_id: _Optional[int] = ..., takes: _Optional[_Iterable[_Union[InflightTxn, _Mapping]]] = ..., puts: _Optional[_Iterable[_Union[InflightTxn, _Mapping]]] = ..., commit_marks: _Optional[_Iterable[_Union[CommitMark, _Mapping]]] = ..., tags: _Optional[_Iterable[_Union[CommitTag, _Mapping]]] = ...) -> None: ...
