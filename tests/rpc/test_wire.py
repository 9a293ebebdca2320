"""Taken events on the wire: column chunks and EventBatch messages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest_toolkit.channel import Event, EventColumns
from ingest_toolkit.rpc.errors import InvalidRequestError
from ingest_toolkit.rpc.proto import agent_pb2 as pb
from ingest_toolkit.rpc.wire import column_chunks, decode_batch, decode_columns, encode_batch, fill_columns

events_strategy = st.lists(
    st.builds(Event, st.binary(max_size=300), st.dictionaries(st.text(max_size=8), st.text(max_size=30), max_size=3),
              st.integers(0, 2**63 - 1)),
    max_size=80)


def _cost(event: Event) -> int:
    return len(event.body) + 16 + sum(len(k) + len(v) + 4 for k, v in event.headers.items())


@given(events_strategy, st.integers(1, 2000))
def test_column_chunks_split_in_order_and_end_at_the_size(events: list[Event], chunk_bytes: int) -> None:
    parts = list(column_chunks(EventColumns.of(events), chunk_bytes))
    assert [e for part in parts for e in part.events()] == events
    for part in parts:
        assert len(part) >= 1
        sizes = [_cost(e) for e in part.events()]
        assert sum(sizes[:-1]) < chunk_bytes  # the chunk ends at the event that brings it to the size
    for part in parts[:-1]:
        assert sum(_cost(e) for e in part.events()) >= chunk_bytes


@given(events_strategy)
def test_batches_round_trip_columns_and_events(events: list[Event]) -> None:
    columns = EventColumns.of(events)
    batch = fill_columns(pb.EventBatch(), columns)
    assert decode_columns(batch).events() == decode_batch(batch) == events
    assert decode_batch(pb.EventBatch.FromString(encode_batch(events, with_seqs=True).SerializeToString())) == events
    if not any(e.headers for e in events):
        assert not batch.header_counts  # header-less batches carry no header arrays


def test_inconsistent_batches_are_refused() -> None:
    with pytest.raises(InvalidRequestError, match=r"^events.seqs: 1 values for 2 bodies"):
        decode_columns(pb.EventBatch(bodies=[b"a", b"b"], seqs=[1]))
    with pytest.raises(InvalidRequestError, match=r"^events.header_counts: add up to 2, but there are 1 header_keys"):
        decode_columns(pb.EventBatch(bodies=[b"a"], header_counts=[2], header_keys=["k"], header_values=["v"]))
