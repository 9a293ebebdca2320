from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TxnState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TXN_STATE_UNSPECIFIED: _ClassVar[TxnState]
    TXN_STATE_OPEN: _ClassVar[TxnState]
    TXN_STATE_COMMITTED: _ClassVar[TxnState]
    TXN_STATE_ROLLED_BACK: _ClassVar[TxnState]
    TXN_STATE_UNKNOWN: _ClassVar[TxnState]
TXN_STATE_UNSPECIFIED: TxnState
TXN_STATE_OPEN: TxnState
TXN_STATE_COMMITTED: TxnState
TXN_STATE_ROLLED_BACK: TxnState
TXN_STATE_UNKNOWN: TxnState

class EventBatch(_message.Message):
    __slots__ = ("bodies", "seqs", "header_counts", "header_keys", "header_values", "payloads")
    BODIES_FIELD_NUMBER: _ClassVar[int]
    SEQS_FIELD_NUMBER: _ClassVar[int]
    HEADER_COUNTS_FIELD_NUMBER: _ClassVar[int]
    HEADER_KEYS_FIELD_NUMBER: _ClassVar[int]
    HEADER_VALUES_FIELD_NUMBER: _ClassVar[int]
    PAYLOADS_FIELD_NUMBER: _ClassVar[int]
    bodies: _containers.RepeatedScalarFieldContainer[bytes]
    seqs: _containers.RepeatedScalarFieldContainer[int]
    header_counts: _containers.RepeatedScalarFieldContainer[int]
    header_keys: _containers.RepeatedScalarFieldContainer[str]
    header_values: _containers.RepeatedScalarFieldContainer[str]
    payloads: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, bodies: _Optional[_Iterable[bytes]] = ..., seqs: _Optional[_Iterable[int]] = ..., header_counts: _Optional[_Iterable[int]] = ..., header_keys: _Optional[_Iterable[str]] = ..., header_values: _Optional[_Iterable[str]] = ..., payloads: _Optional[_Iterable[bytes]] = ...) -> None: ...

class PutRequest(_message.Message):
    __slots__ = ("channel", "batch_id", "events")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    channel: str
    batch_id: str
    events: EventBatch
    def __init__(self, channel: _Optional[str] = ..., batch_id: _Optional[str] = ..., events: _Optional[_Union[EventBatch, _Mapping]] = ...) -> None: ...

class PutAck(_message.Message):
    __slots__ = ("accepted", "duplicate", "channels")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    duplicate: bool
    channels: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, accepted: _Optional[int] = ..., duplicate: _Optional[bool] = ..., channels: _Optional[_Iterable[str]] = ...) -> None: ...

class TxnRequest(_message.Message):
    __slots__ = ("begin", "put", "take", "extend", "commit", "rollback")
    BEGIN_FIELD_NUMBER: _ClassVar[int]
    PUT_FIELD_NUMBER: _ClassVar[int]
    TAKE_FIELD_NUMBER: _ClassVar[int]
    EXTEND_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_FIELD_NUMBER: _ClassVar[int]
    begin: Begin
    put: EventBatch
    take: Take
    extend: Extend
    commit: End
    rollback: End
    def __init__(self, begin: _Optional[_Union[Begin, _Mapping]] = ..., put: _Optional[_Union[EventBatch, _Mapping]] = ..., take: _Optional[_Union[Take, _Mapping]] = ..., extend: _Optional[_Union[Extend, _Mapping]] = ..., commit: _Optional[_Union[End, _Mapping]] = ..., rollback: _Optional[_Union[End, _Mapping]] = ...) -> None: ...

class Begin(_message.Message):
    __slots__ = ("channel", "lease_seconds", "take", "payloads", "window")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TAKE_FIELD_NUMBER: _ClassVar[int]
    PAYLOADS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    channel: str
    lease_seconds: float
    take: int
    payloads: bool
    window: int
    def __init__(self, channel: _Optional[str] = ..., lease_seconds: _Optional[float] = ..., take: _Optional[int] = ..., payloads: _Optional[bool] = ..., window: _Optional[int] = ...) -> None: ...

class Take(_message.Message):
    __slots__ = ("max_events",)
    MAX_EVENTS_FIELD_NUMBER: _ClassVar[int]
    max_events: int
    def __init__(self, max_events: _Optional[int] = ...) -> None: ...

class Extend(_message.Message):
    __slots__ = ("lease_seconds",)
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    lease_seconds: float
    def __init__(self, lease_seconds: _Optional[float] = ...) -> None: ...

class End(_message.Message):
    __slots__ = ("take_next",)
    TAKE_NEXT_FIELD_NUMBER: _ClassVar[int]
    take_next: int
    def __init__(self, take_next: _Optional[int] = ...) -> None: ...

class TxnResponse(_message.Message):
    __slots__ = ("begun", "put", "chunk", "extended", "ended", "failure")
    BEGUN_FIELD_NUMBER: _ClassVar[int]
    PUT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    EXTENDED_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    begun: Begun
    put: PutDone
    chunk: EventChunk
    extended: Extended
    ended: Ended
    failure: Failure
    def __init__(self, begun: _Optional[_Union[Begun, _Mapping]] = ..., put: _Optional[_Union[PutDone, _Mapping]] = ..., chunk: _Optional[_Union[EventChunk, _Mapping]] = ..., extended: _Optional[_Union[Extended, _Mapping]] = ..., ended: _Optional[_Union[Ended, _Mapping]] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ...) -> None: ...

class Begun(_message.Message):
    __slots__ = ("channel_id", "lease_seconds", "window")
    CHANNEL_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    channel_id: bytes
    lease_seconds: float
    window: int
    def __init__(self, channel_id: _Optional[bytes] = ..., lease_seconds: _Optional[float] = ..., window: _Optional[int] = ...) -> None: ...

class PutDone(_message.Message):
    __slots__ = ("first_seq", "count")
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    first_seq: int
    count: int
    def __init__(self, first_seq: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class EventChunk(_message.Message):
    __slots__ = ("events", "last")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    events: EventBatch
    last: bool
    def __init__(self, events: _Optional[_Union[EventBatch, _Mapping]] = ..., last: _Optional[bool] = ...) -> None: ...

class Extended(_message.Message):
    __slots__ = ("lease_seconds",)
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    lease_seconds: float
    def __init__(self, lease_seconds: _Optional[float] = ...) -> None: ...

class Ended(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: TxnState
    def __init__(self, state: _Optional[_Union[TxnState, str]] = ...) -> None: ...

class Failure(_message.Message):
    __slots__ = ("code", "kind", "message", "attrs_json", "state")
    CODE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ATTRS_JSON_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    code: str
    kind: str
    message: str
    attrs_json: str
    state: TxnState
    def __init__(self, code: _Optional[str] = ..., kind: _Optional[str] = ..., message: _Optional[str] = ..., attrs_json: _Optional[str] = ..., state: _Optional[_Union[TxnState, str]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("channel",)
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    channel: str
    def __init__(self, channel: _Optional[str] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("status_json",)
    STATUS_JSON_FIELD_NUMBER: _ClassVar[int]
    status_json: str
    def __init__(self, status_json: _Optional[str] = ...) -> None: ...
