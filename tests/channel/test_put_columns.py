"""``Transaction.put_columns`` stores exactly what ``put_many`` stores for the same events."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest_toolkit.channel import Event, EventColumns, FileChannel
from ingest_toolkit.channel.codec import decode_puts, encode_put
from ingest_toolkit.channel.transaction import _column_payloads, _payloads
from ingest_toolkit.errors import EventTooLargeError

_SIZES = st.sampled_from([0, 1, 127, 128, 300, 16383, 16384])
_TEXT = st.text(min_size=0, max_size=12) | st.sampled_from(["é", "日本", "x" * 127, "y" * 200])
_HEADERS = st.dictionaries(_TEXT, _TEXT, max_size=4)
_EVENTS = st.lists(st.builds(lambda n, fill, headers: Event(bytes([fill]) * n, headers),
                             _SIZES, st.integers(0, 255), _HEADERS), max_size=12)


@given(_EVENTS)
def test_column_payloads_are_the_bytes_put_many_writes(events: list[Event]) -> None:
    assert _column_payloads(EventColumns.of(events)) == _payloads(events)


_ONE_HEADER = st.lists(st.builds(lambda n, fill, key, value: Event(bytes([fill]) * n, {key: value}),
                                 _SIZES, st.integers(0, 255), st.sampled_from(["ingest.hops", "k" * 200]),
                                 st.sampled_from(["1", "2", "v" * 130])), min_size=1, max_size=12)


@given(_ONE_HEADER)
def test_column_payloads_of_events_with_one_header_each_are_the_bytes_put_many_writes(events: list[Event]) -> None:
    assert _column_payloads(EventColumns.of(events)) == _payloads(events)  # a forwarded batch's shape


@settings(max_examples=25)
@given(_EVENTS)
def test_put_columns_stores_the_same_events_in_order(tmp_path_factory: pytest.TempPathFactory,
                                                     events: list[Event]) -> None:
    root = tmp_path_factory.mktemp("ch")
    ch = FileChannel(checkpoint_dir=str(root / "cp"), data_dirs=[str(root / "data")], min_free_bytes=0,
                     checkpoint_interval=0)
    try:
        with ch.transaction() as tx:
            seqs = tx.put_columns(EventColumns.of(events))
        with ch.transaction() as tx:
            taken = tx.take(len(events) + 1)
    finally:
        ch.close()
    assert [e.seq for e in taken] == seqs and len(set(seqs)) == len(events)
    assert [(e.body, dict(e.headers)) for e in taken] == [(e.body, dict(e.headers)) for e in events]


def test_put_columns_refuses_an_oversized_event_and_stores_nothing(tmp_path: Path) -> None:
    ch = FileChannel(checkpoint_dir=str(tmp_path / "cp"), data_dirs=[str(tmp_path / "data")], min_free_bytes=0,
                     checkpoint_interval=0, max_event_size=1024)
    try:
        with pytest.raises(EventTooLargeError), ch.transaction() as tx:
            tx.put_columns(EventColumns.of([Event(b"ok"), Event(b"x" * 2000)]))
        assert len(ch) == 0
    finally:
        ch.close()


@given(st.lists(st.builds(Event, st.binary(max_size=300),
                          st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=3)), max_size=30))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_take_payloads_are_the_stored_puts_that_decode_to_what_take_columns_returns(
        tmp_path: Path, events: list[Event]) -> None:
    root = tmp_path / str(uuid.uuid4())
    with FileChannel(checkpoint_dir=str(root / "cp"), data_dirs=[str(root / "data")], min_free_bytes=0) as ch:
        with ch.transaction() as tx:
            tx.put_many(events)
        tx = ch.transaction()
        expected = tx.take_columns(100)
        tx.rollback()
        with ch.transaction() as tx:
            payloads, seqs = tx.take_payloads(100)
        assert payloads == [encode_put(e.body, e.headers) for e in events] and seqs == expected.seqs
        assert decode_puts(payloads, seqs) == expected
        assert len(ch) == 0
