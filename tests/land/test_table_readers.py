"""Readers of a Delta or Iceberg table see whole batches only (issue 29, item 4): while landing
processes run and are SIGKILLed at random phases, a reader with the format's own library
(``deltalake``, PyIceberg) reads the table again and again; every snapshot it reads holds whole,
committed batches, never a duplicate event, and at the end every event lands exactly once."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.land import InProcessSource, land_once
from ingest_toolkit.land.faults import TABLE_PHASES

from .helpers import assert_landed_exactly_once, channel_settings, make_events, put_events
from .tables import FORMATS, committed_batches, format_config, read_table, whole_batches
from .test_table_crash import _land_child

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROUNDS = 8


@pytest.fixture
def crash_seed() -> int:
    """``CRASH_SEED`` from the environment (to repeat a run's choices), else a random one."""
    return int(os.environ.get("CRASH_SEED", random.randrange(1 << 32)))


@pytest.mark.parametrize("table_format", FORMATS)
def test_a_reader_never_sees_a_partial_batch_while_landings_are_killed(tmp_path: Path, table_format: str,
                                                                       crash_seed: int) -> None:
    rng = random.Random(crash_seed)
    settings = channel_settings(tmp_path)
    with FileChannel(**settings) as channel:
        expected = put_events(channel, make_events(ROUNDS * 200))
        channel_id = channel.channel_id
    config = format_config(tmp_path / "landing", table_format)
    stop, reads, problems = threading.Event(), [0], []

    def reader() -> None:
        while not stop.is_set():
            try:
                rows = read_table(config, "events")
                if rows.num_rows:
                    seqs = rows.column("seq").to_pylist()
                    assert len(seqs) == len(set(seqs)), "a duplicate event"
                    whole_batches(rows, committed_batches(config, "events"))
                reads[0] += 1
            except AssertionError as err:
                problems.append(str(err))
            except Exception:  # noqa: BLE001 - a table created or committed at that moment: read again
                pass

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        for _ in range(ROUNDS):
            phase = rng.choice([*TABLE_PHASES, "none"])
            done = _land_child(tmp_path, settings, table_format, phase if phase != "none" else "")
            assert done.returncode in (0, -9), done.stderr[-2000:]
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not problems, f"seed {crash_seed}: {problems[:3]}"
    assert reads[0] > ROUNDS, "the reader hardly read"
    with FileChannel(**settings) as channel:
        while len(channel):
            land_once(InProcessSource(channel, "events"), format_config(tmp_path / "landing", table_format), None)
    rows = read_table(config, "events")
    assert_landed_exactly_once(rows, expected, channel_id)
    whole_batches(rows, committed_batches(config, "events"))
