"""The line splitter: lossless, resumable from any piece end, chunking-independent."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest_toolkit.collect.errors import OversizedLineError
from ingest_toolkit.collect.sources.lines import ChunkSplitter, LineSplitter, Piece

data_st = st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\r\n", b"long-line-", b"\xff"]), max_size=60).map(b"".join)


def run(data: bytes, cuts: list[int], max_bytes: int, policy: str, start: int = 0, final: bool = True) -> list[Piece]:
    splitter = LineSplitter(start, max_bytes, policy)  # type: ignore[arg-type]
    out: list[Piece] = []
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    for a, b in zip(bounds, bounds[1:], strict=False):
        out += splitter.feed(data[a:b])
    return out + (splitter.flush() if final else [])


@given(data_st, st.lists(st.integers(0, 1000), max_size=8), st.integers(1, 12))
def test_split_policy_is_lossless_and_independent_of_chunking(data: bytes, cuts: list[int], limit: int) -> None:
    pieces = run(data, cuts, limit, "split")
    assert pieces == run(data, [], limit, "split")
    assert all(len(p.body) <= limit for p in pieces)
    # nothing but the newlines is removed, and each piece is the stream's bytes at its offsets
    assert b"".join(p.body for p in pieces) == data.replace(b"\n", b"")
    assert all(data[p.start:p.start + len(p.body)] == p.body for p in pieces)
    ends = [p.end for p in pieces]
    assert ends == sorted(ends) and (not pieces or ends[-1] == len(data))


@given(data_st, st.integers(1, 12), st.sampled_from(["split", "truncate"]), st.data())
def test_resuming_at_any_piece_end_gives_the_rest(data: bytes, limit: int, policy: str, draw: st.DataObject) -> None:
    pieces = run(data, [], limit, policy)
    if not pieces:
        return
    k = draw.draw(st.integers(0, len(pieces) - 1))
    resume = pieces[k].end
    assert run(data[resume:], [], limit, policy, start=resume) == pieces[k + 1:]


@given(data_st, st.integers(1, 12))
def test_truncate_keeps_line_heads_and_fail_raises(data: bytes, limit: int) -> None:
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    pieces = run(data, [3, 7], limit, "truncate")
    assert [p.body for p in pieces] == [line[:limit] for line in lines]
    assert [p.oversized for p in pieces] == [len(line) > limit for line in lines]
    if any(len(line) > limit for line in lines):
        with pytest.raises(OversizedLineError):
            run(data, [], limit, "fail")
    else:
        assert [p.body for p in run(data, [], limit, "fail")] == lines


def test_partial_last_line_waits_without_flush() -> None:
    pieces = run(b"one\ntwo\nthr", [], 100, "split", final=False)
    assert [(p.body, p.start, p.end) for p in pieces] == [(b"one", 0, 4), (b"two", 4, 8)]


def test_chunk_splitter_policies() -> None:
    assert [p.body for p in _chunks(b"abcdefg", 3, "split")] == [b"abc", b"def", b"g"]
    assert [(p.body, p.end, p.oversized) for p in _chunks(b"abcdefg", 3, "truncate")] == [(b"abc", 7, True)]
    assert [p.body for p in _chunks(b"abc", 3, "fail")] == [b"abc"]
    with pytest.raises(OversizedLineError):
        _chunks(b"abcd", 3, "fail")
    assert _chunks(b"", 3, "fail") == []


def _chunks(data: bytes, limit: int, policy: str) -> list[Piece]:
    splitter = ChunkSplitter(0, limit, policy)  # type: ignore[arg-type]
    out = []
    for i in range(0, len(data), 2):
        out += splitter.feed(data[i:i + 2])
    return out + splitter.flush()


@given(data_st, st.lists(st.integers(0, 1000), max_size=8))
def test_longest_line_matches_a_plain_split(data: bytes, cuts: list[int]) -> None:
    from ingest_toolkit.collect.sources.lines import longest_line
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    chunks = [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    assert longest_line(chunks) == max(map(len, data.split(b"\n")))
