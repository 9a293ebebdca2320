"""The agent's gRPC service: batched durable puts, leased remote transactions, status.

Threading model: grpcio's synchronous server runs each call on a pool thread. A remote
transaction lives inside one ``Transaction`` stream, so it stays on *one* server thread from
begin to end, which is what FileChannel's one-open-transaction-per-thread rule needs; the lease
reaper (:mod:`.leases`) and the stream's end may roll it back from other threads. The number of
open remote transactions is capped below the pool size so that puts and status calls always
find a free thread. A put stream adds two threads of its own while it lasts (:mod:`.ordered`):
one receives the next batches while the other commits, and the call's thread sends the acks.

Requests: every request is parsed and checked at the edge (:mod:`.edge`) before anything acts
on it; a refused one is INVALID_ARGUMENT (inside a transaction: a ``Failure`` that leaves the
transaction open) and one WARNING line naming the peer and the field, never a traceback.

Metrics: ``observe(op, channel, seconds)``, when given, is called for every ``take`` request
(taking from the channel and filling the response chunks; sending them is not included) and
every batch a take window takes, with op ``"take"``, and for every commit of a take transaction
(a window's batches included) with op ``"commit"``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing
from typing import Any, NoReturn

import grpc

from ..channel import EventColumns, FileChannel, TxnKind, TxnState
from ..channel import Transaction as ChannelTransaction  # the name Transaction is the RPC method here
from ..channel.checkpoint import read_checkpoint_meta
from ..channel.tools.health import observe_channel
from ..errors import CheckpointInvalid, IngestError, TransactionCapacityError
from ..security import bearer_ok
from .edge import check_put, check_status, check_txn_request
from .errors import (
    AgentUnavailableError,
    AuthenticationError,
    ErrorInfo,
    ForwardedChannelError,
    InvalidRequestError,
    LeaseExpiredError,
    UnknownChannelError,
    describe,
)
from .handlers import PutHandler
from .leases import LeaseTable, RemoteTxn
from .ordered import ItemFailed, apply_in_order
from .proto import agent_pb2 as pb
from .proto import agent_pb2_grpc as pb_grpc
from .window import MAX_WINDOW, TakeResponses, TakeWindow
from .wire import CHUNK_BYTES, column_chunks, fill_columns, payload_chunks

__all__ = ["AgentService", "Observer"]

log = logging.getLogger("ingest_toolkit.rpc")

Observer = Callable[[str, str, float], None]
"""``(op, channel, seconds)``: op ``"take"`` (a take request served) or ``"commit"`` (a take
transaction committed)."""

_STATES = {TxnState.OPEN: pb.TXN_STATE_OPEN, TxnState.COMMITTED: pb.TXN_STATE_COMMITTED,
           TxnState.ROLLED_BACK: pb.TXN_STATE_ROLLED_BACK, TxnState.UNKNOWN: pb.TXN_STATE_UNKNOWN}


class AgentService(pb_grpc.AgentServicer):
    """Serves ``channels`` (looked up per call, so the mapping may change while serving).

    ``token``: bearer token every call must carry (None: no auth). Leases: ``default_lease_seconds``
    when the client asks for none, never more than ``max_lease_seconds``. ``observe``: see the
    module's Metrics paragraph. ``forwarded``: channels a sink group of the agent empties (channel
    -> group); a take from one of them is refused (ForwardedChannelError), as the group's
    exactly-once needs it to be the channel's only consumer. ``forwarding``: the status of the sink
    group that empties a channel (None: none does), served as the status's ``forwarding``.
    """

    def __init__(self, channels: Mapping[str, FileChannel], put_handler: PutHandler, *,
                 forwarded: Mapping[str, str] | None = None,
                 token: str | None = None, default_lease_seconds: float = 60.0,
                 max_lease_seconds: float = 3600.0, max_open_transactions: int = 48,
                 chunk_bytes: int = CHUNK_BYTES, observe: Observer | None = None,
                 forwarding: Callable[[str], dict[str, Any] | None] | None = None) -> None:
        self._forwarded = dict(forwarded or {})  # channel -> the sink group that empties it
        self._forwarding = forwarding
        self._channels, self._put_handler, self._token = channels, put_handler, token
        self._observe = observe
        self.leases = LeaseTable(default_lease=default_lease_seconds, max_lease=max_lease_seconds)
        self.max_open_transactions, self._chunk_bytes = max_open_transactions, chunk_bytes

    @property
    def authenticates(self) -> bool:
        return self._token is not None

    def start(self) -> None:
        self.leases.start()

    def stop(self) -> None:
        self.leases.stop()

    # -- Put ------------------------------------------------------------------------------
    def Put(self, request: pb.PutRequest | InvalidRequestError,  # noqa: N802
            context: grpc.ServicerContext) -> pb.PutAck:
        self._authorize(context, "Put")
        return self._put(request, context)

    def PutStream(self, requests: Iterator[pb.PutRequest | InvalidRequestError],  # noqa: N802
                  context: grpc.ServicerContext) -> Iterator[pb.PutAck]:
        """Each batch committed, then acknowledged, in the order of the stream; the next batches
        are received while one commits (:mod:`.ordered`: a thread reads, one commits, this one
        sends the acks). The first failure ends the stream: nothing received after it is stored."""
        self._authorize(context, "PutStream")
        try:
            with closing(apply_in_order(requests, self._store, name="put-stream")) as acks:
                yield from acks
        except ItemFailed as failed:
            _abort(context, failed.error, _put_what(failed.item))

    def _put(self, request: pb.PutRequest | InvalidRequestError, context: grpc.ServicerContext) -> pb.PutAck:
        try:
            return self._store(request)
        except Exception as err:  # every failure becomes a precise status
            _abort(context, err, _put_what(request))

    def _store(self, request: pb.PutRequest | InvalidRequestError) -> pb.PutAck:
        """Check ``request`` and commit its batch through the put handler: the ack, once committed."""
        put = check_put(request)
        if put.channel is not None:
            self._channel(put.channel)
        result = self._put_handler(put.channel, put.columns, put.batch_id)
        return pb.PutAck(accepted=result.accepted, duplicate=result.duplicate, channels=list(result.channels))

    # -- Status ---------------------------------------------------------------------------
    def Status(self, request: pb.StatusRequest | InvalidRequestError,  # noqa: N802
               context: grpc.ServicerContext) -> pb.StatusReply:
        self._authorize(context, "Status")
        what = "status" if isinstance(request, InvalidRequestError) else f"status of {request.channel}"
        try:
            name = check_status(request)
            status = self.status(name)
        except Exception as err:
            _abort(context, err, what)
        return pb.StatusReply(status_json=json.dumps(status, default=str))

    def status(self, name: str) -> dict[str, Any]:
        """``checkpoint.meta`` as last written (``checkpoint``: the parsed view with ages;
        ``checkpoint_meta``: every field of the file), the segment health the channel checks judge
        (``segments``: reference recount, drained logs, missing or cut segments; see
        :func:`~ingest_toolkit.channel.tools.health.channel_health`), the live counters, and the
        remote transactions; for a channel a sink group empties, ``forwarding`` (its sinks and how
        long each has gone unanswered)."""
        channel = self._channel(name)
        try:
            info = read_checkpoint_meta(channel.config.checkpoint_dir)
            problem = None
        except CheckpointInvalid as err:  # the live counters below still answer; the next checkpoint rewrites it
            info, problem = None, str(err)
        checkpoint = None
        if info is not None:
            now = time.time_ns()
            checkpoint = {**dataclasses.asdict(info), "age_seconds": info.age_seconds(now),
                          "backlog_age_seconds": info.backlog_age_seconds(now)}
        live = channel.stats()
        live["log_files"] = {str(k): v for k, v in live["log_files"].items()}
        observed = observe_channel(channel.config.checkpoint_dir, channel.config.data_dirs)
        forwarding = self._forwarding(name) if self._forwarding is not None else None
        return {"channel": name, "channel_id": channel.channel_id.hex(), "queue_size": len(channel),
                "checkpoint": checkpoint, "live": live, "remote_transactions": self.leases.stats(),
                **observed, **({"checkpoint_error": problem} if problem else {}),
                **({"forwarding": forwarding} if forwarding is not None else {})}

    # -- Transaction ----------------------------------------------------------------------
    def Transaction(self, requests: Iterator[pb.TxnRequest | InvalidRequestError],  # noqa: N802
                    context: grpc.ServicerContext) -> Iterator[pb.TxnResponse]:
        self._authorize(context, "Transaction")
        begin = self._first(requests, context)
        if begin.window and begin.take:
            yield from self._serve_window(begin, requests, context)
            return
        remote, channel_id, take = self._begin(begin, context)
        current = [remote]  # the stream's transaction: a commit with take_next replaces it
        context.add_callback(lambda: current[0].abandon())  # runs however the call ends, on a gRPC thread
        try:
            yield pb.TxnResponse(begun=pb.Begun(channel_id=channel_id, lease_seconds=remote.lease_seconds))
            if take:
                yield from self._serve(remote, pb.TxnRequest(take=pb.Take(max_events=take)))
            for request in requests:
                yield from self._serve(current[0], request)
                if current[0].tx.state is not TxnState.OPEN:
                    following = self._take_next(current[0], request, context)
                    if following is None:
                        return
                    self.leases.remove(current[0])
                    current[0] = following
                    if not context.is_active():  # the call ended before the swap: its callback missed it
                        following.abandon()
                        return
                    yield pb.TxnResponse(begun=pb.Begun(channel_id=channel_id, lease_seconds=following.lease_seconds))
                    assert isinstance(request, pb.TxnRequest)  # _take_next returned None for a refusal
                    yield from self._serve(following, pb.TxnRequest(take=pb.Take(max_events=request.commit.take_next)))
        except grpc.RpcError:
            remote = current[0]
            log.info("client %s left remote transaction %s on %s; rolling back %d events", remote.peer,
                     remote.tx.txn_id, remote.channel, remote.tx.count,
                     extra=remote.log_fields(events=remote.tx.count, outcome="client left"))
        finally:
            self.leases.remove(current[0])
            current[0].abandon()

    def _take_next(self, ended: RemoteTxn, request: pb.TxnRequest | InvalidRequestError,
                   context: grpc.ServicerContext) -> RemoteTxn | None:
        """The next take transaction a committed take asked for (``End.take_next``), or None: the
        stream then ends as before. Opened on this thread, like the one before it."""
        if (isinstance(request, InvalidRequestError) or request.WhichOneof("op") != "commit"
                or not request.commit.take_next or ended.tx.state is not TxnState.COMMITTED
                or ended.tx.kind is TxnKind.PUT):
            return None
        channel = self._channels.get(ended.channel)
        if channel is None:
            return None
        try:
            tx = channel.transaction()
        except IngestError as err:  # e.g. the channel closed meanwhile: the client opens a new take
            log.info("no next take on %s for %s after its commit: %s", ended.channel, ended.peer, err)
            return None
        following = RemoteTxn(tx, channel=ended.channel, lease_seconds=ended.lease_seconds,
                              peer=ended.peer, cancel=context.cancel, payloads=ended.payloads)
        self.leases.remove(ended)
        if not self.leases.add(following, limit=self.max_open_transactions):
            following.abandon()
            return None
        return following

    def _first(self, requests: Iterator[pb.TxnRequest | InvalidRequestError],
               context: grpc.ServicerContext) -> pb.Begin:
        """The stream's first request, which must be a valid ``begin``; else the call is aborted."""
        try:
            first = next(requests, None)
            if first is None or check_txn_request(first).op != "begin":
                raise InvalidRequestError("a transaction stream must start with a begin request")
            assert isinstance(first, pb.TxnRequest)  # check_txn_request raised any refusal
        except Exception as err:
            _abort(context, err, "begin transaction")
        return first.begin

    def _serve_window(self, begin: pb.Begin, requests: Iterator[pb.TxnRequest | InvalidRequestError],
                      context: grpc.ServicerContext) -> Iterator[pb.TxnResponse]:
        """A take window (``Begin.window``, :mod:`.window`): its batches sent ahead, then one
        commit (of the oldest), rollback or extend per request. A commit's ``ended`` is sent before
        the batch that replaces it is read, so the client goes on while the agent reads."""
        try:
            channel = self._channel(begin.channel)
            self._check_takeable(begin.channel)
            capacity = channel.config.transaction_capacity
            if begin.take > capacity:
                raise TransactionCapacityError(capacity=capacity, requested=begin.take)
            window = TakeWindow(channel, self._take_responses(begin.payloads), observe=self._observe,
                                name=begin.channel,
                                size=min(begin.window, MAX_WINDOW), batch=begin.take,
                                lease_seconds=self.leases.lease_for(begin.lease_seconds),
                                lease_for=self.leases.lease_for, peer=context.peer(), cancel=context.cancel)
            if not self.leases.add(window, limit=self.max_open_transactions):
                raise AgentUnavailableError(
                    f"the agent already has {self.max_open_transactions} open remote transactions "
                    "(max_open_transactions); end some, or retry later")
        except Exception as err:
            _abort(context, err, "begin take window")
        context.add_callback(window.abandon)  # runs however the call ends, on a gRPC thread
        try:
            yield pb.TxnResponse(begun=pb.Begun(channel_id=channel.channel_id, lease_seconds=window.lease_seconds,
                                                window=window.size))
            for batch in window.fill():
                yield from batch
                if window.ended:
                    return
            for request in requests:
                for part in window.serve(request):
                    yield from part
                if window.ended:
                    return
        except grpc.RpcError:
            log.info("client %s left take window %s on %s; rolling back %d events", window.peer, window.txn_id,
                     window.channel, window.count)
        finally:
            self.leases.remove(window)
            window.abandon()

    def _take_responses(self, payloads: bool) -> TakeResponses:
        """Take into a transaction and build the chunks, as a ``take`` request does."""

        def take(tx: ChannelTransaction, n: int) -> list[pb.TxnResponse]:
            return self._take_payloads(*tx.take_payloads(n)) if payloads else self._take(tx.take_columns(n))

        return take

    def _begin(self, begin: pb.Begin, context: grpc.ServicerContext) -> tuple[RemoteTxn, bytes, int]:
        """Open the transaction ``begin`` asks for; any problem aborts the call."""
        try:
            channel = self._channel(begin.channel)
            if begin.take:
                self._check_takeable(begin.channel)
            lease = self.leases.lease_for(begin.lease_seconds)
            remote = RemoteTxn(channel.transaction(), channel=begin.channel, lease_seconds=lease,
                               peer=context.peer(), cancel=context.cancel, payloads=begin.payloads)
            if not self.leases.add(remote, limit=self.max_open_transactions):  # atomic check-and-add
                remote.abandon()  # the empty transaction: nothing to undo but its slot
                raise AgentUnavailableError(
                    f"the agent already has {self.max_open_transactions} open remote transactions "
                    "(max_open_transactions); end some, or retry later")
        except Exception as err:
            _abort(context, err, "begin transaction")
        return remote, channel.channel_id, begin.take

    def _serve(self, remote: RemoteTxn, request: pb.TxnRequest | InvalidRequestError) -> list[pb.TxnResponse]:
        """The responses to one request. Computed under the transaction's lock, sent after it:
        a stream suspended in a send must never hold the lock its end-of-call callback needs."""
        with remote.lock:
            if remote.expired_at is not None:
                err = LeaseExpiredError(lease_seconds=remote.lease_seconds, events=remote.expired_events)
                return [_failure(describe(err), remote)]
            try:
                return self._apply(remote, request)
            except Exception as err:
                if isinstance(err, InvalidRequestError):
                    log.warning("refused a request in remote transaction %s on %s from %s: %s", remote.tx.txn_id,
                                remote.channel, remote.peer, err)
                elif not isinstance(err, IngestError):
                    log.exception("remote transaction %s on %s failed", remote.tx.txn_id, remote.channel)
                return [_failure(describe(err), remote)]
            finally:
                remote.renew()

    def _apply(self, remote: RemoteTxn, raw: pb.TxnRequest | InvalidRequestError) -> list[pb.TxnResponse]:
        checked, tx = check_txn_request(raw), remote.tx
        op, request = checked.op, checked.request
        if op == "put":
            assert checked.columns is not None
            seqs = tx.put_columns(checked.columns)
            return [pb.TxnResponse(put=pb.PutDone(first_seq=seqs[0] if seqs else 0, count=len(seqs)))]
        if op == "take":
            self._check_takeable(remote.channel)
            started = time.perf_counter()
            if remote.payloads:  # passed on as stored: the client decodes them
                responses = self._take_payloads(*tx.take_payloads(request.take.max_events))
            else:
                responses = self._take(tx.take_columns(request.take.max_events))
            self._timed("take", remote.channel, started)
            return responses
        if op == "extend":
            wanted = request.extend.lease_seconds  # 0: keep the current length
            remote.renew(self.leases.lease_for(wanted) if wanted else None)
            return [pb.TxnResponse(extended=pb.Extended(lease_seconds=remote.lease_seconds))]
        if op == "commit":
            started = time.perf_counter()
            tx.commit()
            if tx.kind is TxnKind.TAKE:
                self._timed("commit", remote.channel, started)
        elif op == "rollback":
            tx.rollback()
        else:
            raise InvalidRequestError(f"unexpected request {op!r} inside an open transaction")
        _log_take_end(remote, "committed" if op == "commit" else "rolled back")
        return [pb.TxnResponse(ended=pb.Ended(state=_STATES[tx.state]))]

    def _take(self, columns: EventColumns) -> list[pb.TxnResponse]:
        parts = list(column_chunks(columns, self._chunk_bytes)) or [EventColumns()]
        responses = []
        for i, part in enumerate(parts):
            response = pb.TxnResponse()
            fill_columns(response.chunk.events, part)
            response.chunk.last = i == len(parts) - 1
            responses.append(response)
        return responses

    def _take_payloads(self, payloads: list[bytes], seqs: list[int]) -> list[pb.TxnResponse]:
        parts = list(payload_chunks(payloads, seqs, self._chunk_bytes)) or [([], [])]
        responses = []
        for i, (part, part_seqs) in enumerate(parts):
            response = pb.TxnResponse()
            events = response.chunk.events
            events.payloads.extend(part)
            events.seqs.extend(part_seqs)
            response.chunk.last = i == len(parts) - 1
            responses.append(response)
        return responses

    # -- helpers --------------------------------------------------------------------------
    def _timed(self, op: str, channel: str, started: float) -> None:
        if self._observe is not None:
            self._observe(op, channel, time.perf_counter() - started)

    def _check_takeable(self, name: str) -> None:
        group = self._forwarded.get(name)
        if group is not None:
            raise ForwardedChannelError.of(channel=name, group=group)

    def _channel(self, name: str) -> FileChannel:
        channel = self._channels.get(name)
        if channel is None:
            raise UnknownChannelError(channel=name, known=list(self._channels))
        return channel

    def _authorize(self, context: grpc.ServicerContext, method: str) -> None:
        if self._token is None:
            return
        header = dict(context.invocation_metadata() or ()).get("authorization")
        if bearer_ok(header if isinstance(header, str) else None, self._token):
            return
        reason = "no bearer token" if not header else "a wrong bearer token"
        log.warning("refused %s from %s: %s", method, context.peer(), reason)
        _abort(context, AuthenticationError(f"{method} refused: the request carries {reason}; "
                                            "send metadata 'authorization: Bearer <token>'"), method)


def _log_take_end(remote: RemoteTxn, outcome: str) -> None:
    """One INFO line per leased take that ends by the client's request (expiry: the lease reaper
    logs a WARNING), with its event count: what on-call reads to follow the landing's batches."""
    tx = remote.tx
    if tx.kind is TxnKind.TAKE:  # an empty take (a landing polling an empty channel) at DEBUG
        log.log(logging.INFO if tx.count else logging.DEBUG, "remote take %s: %d events of channel %s "
                "(transaction %s, %s)", outcome, tx.count, remote.channel, tx.txn_id, remote.peer,
                extra=remote.log_fields(events=tx.count, outcome=outcome))


def _put_what(request: pb.PutRequest | InvalidRequestError) -> str:
    """How a put names itself in the agent's log."""
    if isinstance(request, InvalidRequestError):
        return "put"
    return f"put into {request.channel or 'the default pipeline'}"


def _failure(info: ErrorInfo, remote: RemoteTxn) -> pb.TxnResponse:
    return pb.TxnResponse(failure=pb.Failure(code=info.code.name, kind=info.kind, message=info.message,
                                             attrs_json=info.attrs_json, state=_STATES[remote.tx.state]))


def _abort(context: grpc.ServicerContext, err: BaseException, what: str) -> NoReturn:
    info = describe(err)
    if isinstance(err, InvalidRequestError):  # a refusal, not a failure of the agent
        log.warning("refused %s from %s: %s", what, context.peer(), info.message)
    elif not isinstance(err, IngestError):
        log.exception("%s failed", what)
    context.set_trailing_metadata(info.metadata())
    context.abort(info.code, info.message)
    raise AssertionError("unreachable: abort raises")
