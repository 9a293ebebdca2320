"""Fuzz targets of the agent's wire parsers: the HTTP source's body parser and the gRPC request
edge (parse, then the checks the service runs before acting). Seeds are what the project's own
clients, tests and docs send; the oracle (harness.py) allows a result or the toolkit's error,
i.e. a 400 / INVALID_ARGUMENT, nothing else."""

from __future__ import annotations

import base64
import json
import math

from hypothesis import given
from hypothesis import strategies as st

from ingest_toolkit.channel import Event
from ingest_toolkit.collect.sources.http_body import NDJSON_TYPES, parse_events
from ingest_toolkit.rpc.edge import check_put, check_txn_request, lenient
from ingest_toolkit.rpc.leases import LeaseTable
from ingest_toolkit.rpc.proto import agent_pb2 as pb
from ingest_toolkit.rpc.wire import fill_batch

from .harness import FUZZ_SETTINGS, check_call, mutated

# -- HTTP bodies ---------------------------------------------------------------------------------

_DOC_EXAMPLE = '[{"headers": {"k": "v"}, "body": "text"}, {"body_base64": "AAE="}]'  # docs/collectors.md
_TEST_ITEMS = [{"headers": {"k": "v"}, "body": "héllo"}, {"body_base64": base64.b64encode(b"\x00\xff").decode()}]

JSON_SEEDS = [
    _DOC_EXAMPLE.encode(),
    json.dumps(_TEST_ITEMS).encode(),
    json.dumps([{"body": "once"}, {"body": "twice?"}]).encode(),
    b'[{"body": "a", "headers": {"host": "web-1", "n": "\\u00e9\\"q"}}]',
    b"[]",
    b"[" * 40 + b"]" * 40,  # deeper than the default limit
    b'[{"body": ' + b"7" * 4400 + b"}]",  # a number beyond the int conversion limit
]
NDJSON_SEEDS = [
    b'{"body": "n1"}\n\n{"body": "n2", "headers": {"a": "b"}}\n',
    b'{"body_base64": "AAE="}\r\n{"body": "x"}',
]
TEXT_SEEDS = [b"p1\np2\r\n", b"a\nb\n", "héllo\n".encode()]
CONTENT_TYPES = ["application/json", "application/json; charset=utf-8", "application/x-ndjson",
                 *sorted(NDJSON_TYPES), "text/plain", None]


@FUZZ_SETTINGS
@given(mutated(JSON_SEEDS + NDJSON_SEEDS + TEXT_SEEDS), st.sampled_from(CONTENT_TYPES),
       st.sampled_from([3, 32, 512]))
def test_http_body_parser(body: bytes, content_type: str | None, max_depth: int) -> None:
    outcome = check_call(lambda: parse_events(body, content_type, max_depth=max_depth))
    if outcome.error is None:
        assert all(isinstance(e.body, bytes) for e in outcome.value)


# -- gRPC requests ---------------------------------------------------------------------------------

_EVENTS = [Event(b"hello"), Event(b"", {"host": "web-1", "k": "v"}), Event(b"\x00\xff" * 20, {"h": "\u00e9"})]


def _put_request(events: list[Event], channel: str = "events", batch_id: str = "") -> bytes:
    request = pb.PutRequest(channel=channel, batch_id=batch_id)  # as AgentClient.put builds it
    fill_batch(request.events, events)
    return request.SerializeToString()


def _txn_put(events: list[Event]) -> bytes:
    request = pb.TxnRequest()  # as RemoteTransaction.put_many builds it
    fill_batch(request.put, events)
    return request.SerializeToString()


PUT_SEEDS = [
    _put_request(_EVENTS, batch_id="host-a/000042"),
    _put_request(_EVENTS[:1], channel=""),
    _put_request([Event(b"x" * 200)] * 3, batch_id="b" * 128),
]
TXN_SEEDS = [
    pb.TxnRequest(begin=pb.Begin(channel="events", lease_seconds=120, take=1000)).SerializeToString(),
    pb.TxnRequest(begin=pb.Begin(channel="events", lease_seconds=0.5)).SerializeToString(),
    pb.TxnRequest(take=pb.Take(max_events=4)).SerializeToString(),
    pb.TxnRequest(extend=pb.Extend(lease_seconds=30)).SerializeToString(),
    pb.TxnRequest(commit=pb.End()).SerializeToString(),
    pb.TxnRequest(rollback=pb.End()).SerializeToString(),
    _txn_put(_EVENTS),
]
_LEASES = LeaseTable(default_lease=60.0, max_lease=3600.0)


def _serve_put(data: bytes) -> object:
    """What AgentService.Put does with the bytes before the put handler: parse, check."""
    return check_put(lenient(pb.PutRequest)(data))


def _serve_txn_request(data: bytes) -> object:
    """What the Transaction stream does with one request before the channel sees it."""
    checked = check_txn_request(lenient(pb.TxnRequest)(data))
    for field in ("begin", "extend"):
        if checked.op == field:
            wanted = getattr(checked.request, field).lease_seconds
            granted = _LEASES.lease_for(wanted)
            assert math.isfinite(granted) and 0 < granted <= _LEASES.max_lease
    return checked


@FUZZ_SETTINGS
@given(mutated(PUT_SEEDS))
def test_grpc_put_decoding(data: bytes) -> None:
    outcome = check_call(lambda: _serve_put(data))
    if outcome.error is None:
        put = outcome.value
        assert len(put.columns.bodies) == len(put.columns.seqs) == len(put.columns.header_counts)
        assert sum(put.columns.header_counts) == len(put.columns.header_keys) == len(put.columns.header_values)


@FUZZ_SETTINGS
@given(mutated(TXN_SEEDS))
def test_grpc_transaction_requests(data: bytes) -> None:
    check_call(lambda: _serve_txn_request(data))
