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

class Take(_message.Message):
    __slots__ = ("pointers",)
    POINTERS_FIELD_NUMBER: _ClassVar[int]
    pointers: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, pointers: _Optional[_Iterable[int]] = ...) -> None: ...

class Commit(_message.Message):
    __slots__ = ("kind", "count")
    KIND_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    kind: TxnKind
    count: int
    def __init__(self, kind: _Optional[_Union[TxnKind, str]] = ..., count: _Optional[int] = ...) -> None: ...

class Rollback(_message.Message):
    __slots__ = ("kind",)
    KIND_FIELD_NUMBER: _ClassVar[int]
    kind: TxnKind
    def __init__(self, kind: _Optional[_Union[TxnKind, str]] = ...) -> None: ...

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
