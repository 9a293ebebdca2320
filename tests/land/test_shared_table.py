"""Two channels of the same name (on two aggregators of a fleet) land into one table at the same time:
every event lands once, event ids stay unique because they carry the channel's identity, and the
commit log numbers every batch of both channels once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.compute as pc
import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.land import InProcessSource, land_once, read_manifests
from ingest_toolkit.land.batches import event_id
from ingest_toolkit.land.manifest import ManifestLog
from ingest_toolkit.land.storage import LocalStorage

from .helpers import channel_settings, landing_config, make_events, put_events, read_landed, staging_leftovers

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROUNDS, PER_ROUND = 3, 400


def test_two_channels_of_one_name_land_concurrently_into_one_table(tmp_path: Path, spark: SparkSession) -> None:
    root = tmp_path / "landing"
    channels = [FileChannel(**channel_settings(tmp_path / host, transaction_capacity=PER_ROUND))
                for host in ("agg1", "agg2")]
    try:
        assert channels[0].channel_id != channels[1].channel_id
        expected = [put_events(ch, make_events(ROUNDS * PER_ROUND), batch=PER_ROUND) for ch in channels]
        config = landing_config(root, max_events=PER_ROUND)
        errors: list[BaseException] = []
        start = threading.Barrier(2)

        def lander(channel: FileChannel) -> None:
            try:
                for _ in range(ROUNDS):
                    start.wait(timeout=120)  # each round's two landings race: take, write, commit, move
                    land_once(InProcessSource(channel, "events"), config, spark)
            except BaseException as err:  # reported below
                errors.append(err)
                start.abort()

        threads = [threading.Thread(target=lander, args=(ch,)) for ch in channels]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        assert not errors, errors
        assert all(len(ch) == 0 for ch in channels)

        table = read_landed(root, "events")
        assert table.num_rows == 2 * ROUNDS * PER_ROUND
        ids = table.column("event_id")
        assert pc.count_distinct(ids).as_py() == table.num_rows
        for ch, want in zip(channels, expected, strict=True):
            mine = {event_id(ch.channel_id, seq) for seq in want}
            assert mine <= set(ids.to_pylist())

        manifests = read_manifests(str(root), "events")
        assert sorted(m.commit for m in manifests) == list(range(1, 2 * ROUNDS + 1))  # no number twice, no gap
        for ch in channels:
            own = [m for m in manifests if m.channel_id == ch.channel_id.hex()]
            assert len(own) == ROUNDS and sum(m.count for m in own) == ROUNDS * PER_ROUND
            landed = ManifestLog(LocalStorage(str(root)), "events").landed(ch.channel_id, 0, 1 << 62)
            assert sum(hi - lo + 1 for lo, hi in landed.ranges) == ROUNDS * PER_ROUND
        assert staging_leftovers(root, "events") == []
    finally:
        for ch in channels:
            ch.close()
