"""Client of the agent's gRPC API: puts, leased remote takes, status.

Errors come back as the toolkit's own exception classes (``ChannelFullError``,
``EventTooLargeError``, ...; see :mod:`.errors`), so code written against an in-process
channel handles a remote one the same way.

>>> client = AgentClient("127.0.0.1:7070", token=os.environ["INGEST_TOKEN"])   # doctest: +SKIP
>>> client.put([Event(b"hello")], channel="events", batch_id="host-a/000042")  # doctest: +SKIP
>>> with client.open_take("events", 1000, lease_seconds=120) as take:          # doctest: +SKIP
...     write_somewhere(take.events)   # commit on normal exit, rollback on an exception
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from ..channel import Event, EventColumns, TxnState
from ..errors import IngestError, TransactionError
from ..handoff import take_within_capacity
from ..security import CLIENT_TLS_NAMES, PathArg, load_client_tls
from .adapter import RemoteChannel
from .errors import RequestTooLargeError, from_rpc_error
from .pipeline import PipelinedTake, TakePipeline, decoded
from .proto import agent_pb2 as pb
from .proto import agent_pb2_grpc as pb_grpc
from .remote_txn import RemoteTransaction, TxnStream
from .server import DEFAULT_MAX_MESSAGE_BYTES, HTTP2_WINDOW_OPTIONS
from .wire import body_bytes, fill_batch, fill_put_columns

__all__ = ["AgentClient", "PipelinedTake", "PutAck", "RemoteSource", "RemoteTake", "TakePipeline"]


@dataclass(frozen=True, slots=True)
class PutAck:
    """The agent's acknowledgement: sent after the commit. ``duplicate``: the batch id was already
    committed, so nothing was stored this time."""

    accepted: int
    duplicate: bool
    channels: tuple[str, ...]


class RemoteTake:
    """An open remote take (the landing's ``TakeBatch``): ``events`` oldest first, each with ``seq``
    (``columns``: the same events as :class:`~ingest_toolkit.channel.EventColumns`).

    The agent holds the events for this take until ``commit`` (they are gone) or ``rollback``
    (back at the head of the queue, in order). Without a request for ``lease_seconds`` the agent
    rolls it back; ``extend()`` renews the lease while the work goes on. A commit after the lease
    ran out raises :class:`~.errors.LeaseExpiredError`.
    """

    def __init__(self, txn: RemoteTransaction, columns: EventColumns,
                 reopen: Callable[[int], RemoteTake] | None = None) -> None:
        self._txn, self.columns, self._reopen = txn, columns, reopen
        self.channel_id: bytes = txn.channel_id

    @functools.cached_property
    def events(self) -> list[Event]:
        """``columns`` as Event objects, made on first use."""
        return self.columns.events()

    @property
    def state(self) -> TxnState:
        return self._txn.state

    @property
    def lease_seconds(self) -> float:
        return self._txn.lease_seconds

    def commit(self) -> None:
        self._txn.commit()

    def rollback(self) -> None:
        self._txn.rollback()

    def commit_and_take(self, max_events: int) -> RemoteTake:
        """Commit this take, then take up to ``max_events`` more as a new take: on the same stream
        in the same round trip when the agent supports it (``End.take_next``), else with a new
        :meth:`AgentClient.open_take`. The commit is durable once the next take is returned; an
        error of the commit raises as :meth:`commit` does (and nothing more is taken)."""
        following = self._txn.commit_and_take(max_events)
        if following is not None:
            return RemoteTake(following[0], following[1], self._reopen)
        if self._reopen is None:
            raise TransactionError("this take cannot open another one; use AgentClient.open_take")
        return self._reopen(max_events)

    def extend(self, lease_seconds: float = 0.0) -> float:
        """Renew the lease from now (``0``: the current length); returns the lease granted."""
        return self._txn.extend(lease_seconds)

    def __enter__(self) -> RemoteTake:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        self._txn.__exit__(exc_type, None, None)


class AgentClient:
    """Connection to one agent. Thread-safe; share one per process and ``close()`` it at the end.

    ``token``: bearer token sent with every call. ``tls_ca``: PEM file of the CA (or the
    self-signed certificate) that signed the agent's certificate; it turns TLS on.
    ``tls_cert`` and ``tls_key``: this client's certificate and unencrypted private key (PEM), for
    an agent that requires client certificates (``client_ca_file``); they turn TLS on too (with
    the system's CAs when ``tls_ca`` is not given). The files are read and checked here: an
    unreadable file, a key that is not the certificate's, or one without the other is a
    ConfigError naming the parameter (or what ``tls_names`` calls it: ``{"ca", "cert", "key"}`` ->
    the caller's setting names). ``tls_server_name`` overrides the name checked against the
    agent's certificate. ``max_message_bytes`` must not exceed the agent's: requests larger than
    it are refused here, before they are sent. ``channel_options``: more gRPC channel arguments
    (e.g. ``grpc.max_reconnect_backoff_ms``), placed before the client's own.
    """

    def __init__(self, address: str, *, token: str | None = None, tls_ca: PathArg | None = None,
                 tls_cert: PathArg | None = None, tls_key: PathArg | None = None,
                 tls_server_name: str | None = None, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 timeout: float = 60.0, tls_names: Mapping[str, str] = CLIENT_TLS_NAMES,
                 channel_options: Sequence[tuple[str, Any]] = ()) -> None:
        options: list[tuple[str, Any]] = [*channel_options,("grpc.max_receive_message_length", -1),
                                          ("grpc.max_send_message_length", -1),
                                          # pings find a vanished agent under an idle open transaction
                                          ("grpc.keepalive_time_ms", 30_000), ("grpc.keepalive_timeout_ms", 10_000),
                                          *HTTP2_WINDOW_OPTIONS]
        if tls_server_name:
            options.append(("grpc.ssl_target_name_override", tls_server_name))
        if tls_ca is not None or tls_cert is not None or tls_key is not None:
            files = load_client_tls(tls_ca, tls_cert, tls_key, names=tls_names)
            credentials = grpc.ssl_channel_credentials(root_certificates=files.root_certificates,
                                                       private_key=files.private_key,
                                                       certificate_chain=files.certificate_chain)
            self._grpc: grpc.Channel = grpc.secure_channel(address, credentials, options=options)
        else:
            self._grpc = grpc.insecure_channel(address, options=options)
        self.address, self.timeout, self.max_message_bytes = address, timeout, max_message_bytes
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._stub = pb_grpc.AgentStub(self._grpc)  # type: ignore[no-untyped-call]  # generated

    # -- puts -----------------------------------------------------------------------------
    def put(self, events: Sequence[Event], *, channel: str | None = None, batch_id: str | None = None) -> PutAck:
        """Store ``events`` durably in one batch; returns after the agent committed them.

        ``channel``: None sends them through the agent's default pipeline. ``batch_id``: retrying
        a batch with the same id after an error or timeout never stores it twice.
        """
        request = pb.PutRequest(channel=channel or "", batch_id=batch_id or "")
        fill_batch(request.events, events)
        self._check_size(request, events)
        try:
            ack = self._stub.Put(request, metadata=self._metadata, timeout=self.timeout)
        except grpc.RpcError as err:
            raise from_rpc_error(err, what="put") from None
        return PutAck(ack.accepted, ack.duplicate, tuple(ack.channels))

    def put_columns(self, columns: EventColumns, *, channel: str | None = None,
                    batch_id: str | None = None) -> PutAck:
        """:meth:`put` for events given as :class:`~ingest_toolkit.channel.EventColumns` (bodies and
        header columns; ``seqs`` are not sent, the channel numbers events): no :class:`Event` per
        event on this side, and the same message on the wire."""
        request = pb.PutRequest(channel=channel or "", batch_id=batch_id or "")
        fill_put_columns(request.events, columns)
        self._check_columns_size(request, columns)
        try:
            ack = self._stub.Put(request, metadata=self._metadata, timeout=self.timeout)
        except grpc.RpcError as err:
            raise from_rpc_error(err, what="put") from None
        return PutAck(ack.accepted, ack.duplicate, tuple(ack.channels))

    def put_stream(self, batches: Iterable[tuple[EventColumns, str | None]], *, channel: str | None = None,
                   window: int = 4) -> Iterator[PutAck]:
        """Put many ``(columns, batch_id)`` batches on one stream, in order: yields one ack per
        batch, in the order sent, each after the agent committed that batch (as :meth:`put_columns`).

        Up to ``window`` batches are in flight, so the transfer and decoding of the next batches
        overlap the agent's commit of the current one, and the order of the commits is the order
        of ``batches`` (several clients putting at once interleave by batch, as with ``put``).
        ``batches`` is read lazily, from gRPC's sending thread, and no longer once this generator
        has ended (a caller may go on reading the same iterator). A failure raises as
        :meth:`put_columns` does after the acks before it: those batches are stored; the failing
        one and any sent after it are not, unless the connection itself broke (then some may be:
        retry them with the same batch ids, which the agent stores once). A batch that cannot be
        sent (too large, header columns that disagree) raises after the acks of the batches
        before it, and nothing after it is sent.
        """
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        slots, done, reading = threading.Semaphore(window), threading.Event(), threading.Lock()
        refused: list[IngestError] = []
        source = iter(batches)

        def requests() -> Iterator[pb.PutRequest]:
            while True:
                with reading:  # held while ``batches`` is read: see the end of put_stream
                    if done.is_set():
                        return
                    try:
                        columns, batch_id = next(source)
                    except StopIteration:
                        return
                request = pb.PutRequest(channel=channel or "", batch_id=batch_id or "")
                try:
                    fill_put_columns(request.events, columns)
                    self._check_columns_size(request, columns)
                except IngestError as err:
                    refused.append(err)
                    return  # half-closes the stream: the agent acks what was sent, then it ends
                while not slots.acquire(timeout=0.1):
                    if done.is_set():
                        return
                yield request

        call = self._stub.PutStream(requests(), metadata=self._metadata)
        try:
            for ack in call:
                slots.release()
                yield PutAck(ack.accepted, ack.duplicate, tuple(ack.channels))
        except grpc.RpcError as err:
            raise from_rpc_error(err, what="put stream") from None
        finally:
            done.set()
            call.cancel()  # a no-op once the stream ended; stops it when the caller stopped reading
            with reading:  # gRPC's sending thread reads ``batches`` no more once this returns
                pass
        if refused:
            raise refused[0]

    def _check_columns_size(self, request: pb.PutRequest, columns: EventColumns) -> None:
        if sum(map(len, columns.bodies)) + 2 * len(columns) >= self.max_message_bytes // 2:
            size = request.ByteSize()
            if size > self.max_message_bytes:
                raise RequestTooLargeError(size=size, limit=self.max_message_bytes)

    # -- takes ----------------------------------------------------------------------------
    def open_take(self, channel: str, max_events: int, lease_seconds: float = 0.0) -> RemoteTake:
        """Take up to ``max_events`` from the head of ``channel`` in a new leased transaction.

        ``lease_seconds``: 0 means the agent's default. Returns fewer events (maybe none) when the
        queue holds fewer.
        """
        txn = RemoteTransaction(self.stream, channel, lease_seconds)
        try:
            columns = txn.begin_with_take(max_events)
        except BaseException:
            txn.discard()
            raise
        return RemoteTake(txn, columns, lambda n: self.open_take(channel, n, lease_seconds))

    def take_pipeline(self, channel: str, max_events: int, *, window: int = 4,
                      lease_seconds: float = 0.0) -> TakePipeline:
        """Pipelined takes from ``channel``: batches of up to ``max_events``, ``window`` of them in
        flight on one stream, so the agent reads the next batches while this process works on
        the current one. Iterate for the batches in take order; commit each
        (:meth:`PipelinedTake.commit`, durable once it returns) in that order, a batch whose elder
        is not committed refuses. ``close()`` (or the end of a ``with`` block) rolls back every
        batch not committed; they are back at the head of the channel in order, as after a dead
        client or an expired lease (one lease for the window: every commit renews it).

        >>> with client.take_pipeline("events", 1000, window=4) as batches:   # doctest: +SKIP
        ...     for batch in batches:
        ...         if not batch.columns:
        ...             break                # the channel is empty: the rest roll back
        ...         write_somewhere(batch.columns)
        ...         batch.commit()
        """
        return TakePipeline(self._decoding_stream, channel, max_events, window=window, lease_seconds=lease_seconds)

    def stream(self) -> TxnStream:
        """A new ``Transaction`` call (used by :class:`RemoteTransaction`)."""
        return TxnStream(self._stub, self._metadata, self.timeout)

    def _decoding_stream(self) -> TxnStream:
        return TxnStream(self._stub, self._metadata, self.timeout, prepare=decoded)

    def transaction(self, channel: str, lease_seconds: float = 0.0) -> RemoteTransaction:
        """A general remote transaction (puts or takes), opened lazily at its first operation."""
        return RemoteTransaction(self.stream, channel, lease_seconds)

    def channel(self, name: str, *, lease_seconds: float = 0.0) -> RemoteChannel:
        """A channel-like adapter (``transaction()``, ``len()``, ``close()``) for ``name``."""
        return RemoteChannel(self, name, lease_seconds=lease_seconds)

    # -- status ---------------------------------------------------------------------------
    def status(self, channel: str) -> dict[str, Any]:
        """``checkpoint`` (checkpoint.meta as last written, or None), ``live`` counters
        (``ch.stats()``), ``queue_size``, ``channel_id`` (hex) and the open remote transactions."""
        try:
            reply = self._stub.Status(pb.StatusRequest(channel=channel), metadata=self._metadata,
                                      timeout=self.timeout)
        except grpc.RpcError as err:
            raise from_rpc_error(err, what=f"status of {channel}") from None
        status: dict[str, Any] = json.loads(reply.status_json)
        return status

    def close(self) -> None:
        """Close the connection; the agent rolls back this client's open transactions."""
        self._grpc.close()

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_size(self, request: pb.PutRequest, events: Sequence[Event]) -> None:
        if body_bytes(events) < self.max_message_bytes // 2:
            return  # far below the limit: skip ByteSize(), which costs as much as the encoding
        size = request.ByteSize()
        if size > self.max_message_bytes:
            raise RequestTooLargeError(size=size, limit=self.max_message_bytes)


class RemoteSource:
    """A channel behind an agent, seen from the landing (the ``TakeSource`` protocol).

    Like the in-process source, a take asks for at most the channel's ``transaction_capacity``:
    the first take that asks for more learns the limit from the agent's
    ``TransactionCapacityError`` and is retried within it.
    """

    def __init__(self, client: AgentClient, channel_name: str, lease_seconds: float = 0.0) -> None:
        self.client, self.name, self.lease_seconds = client, channel_name, lease_seconds
        self._limit: int | None = None

    def open_take(self, max_events: int) -> RemoteTake:
        wanted = max_events if self._limit is None else min(max_events, self._limit)
        return take_within_capacity(lambda n: self.client.open_take(self.name, n, self.lease_seconds), wanted,
                                    learned=self._learned)

    def _learned(self, capacity: int) -> None:
        self._limit = capacity

    def backlog(self) -> int:
        """Committed events not yet taken (live, from the agent)."""
        return int(self.client.status(self.name)["queue_size"])
