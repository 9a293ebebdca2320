"""Landing known events with the real landing (every table format) and curating their hours."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pendulum

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.curate import CuratedResult, CuratedSettings, curate_hour, open_curated
from ingest_toolkit.land import InProcessSource, LandingConfig, land_once
from tests.land.helpers import channel_settings
from tests.land.tables import format_config

HOUR = pendulum.datetime(2026, 11, 20, 8, tz="UTC")


def at(hour: pendulum.DateTime, second: int) -> dict[str, str]:
    return {"timestamp": str(int(hour.add(seconds=second).timestamp() * 1000)), "host": "web-1"}


def json_events(bodies: list[Any], hour: pendulum.DateTime = HOUR) -> list[Event]:
    """Events of ``hour`` (one a second) with these bodies (dicts as JSON, bytes as they are)."""
    return [Event(b if isinstance(b, bytes) else json.dumps(b).encode(), at(hour, i)) for i, b in enumerate(bodies)]


class Tables:
    """A landing root in one format, its channel, and a curated root beside it."""

    def __init__(self, tmp: Path, table_format: str, spark: Any, channel: str = "events") -> None:
        self.tmp, self.format, self.spark, self.channel = tmp, table_format, spark, channel
        self.landing: LandingConfig = format_config(tmp / "landing", table_format, max_events=100_000)
        self.curated_root = str(tmp / "curated")
        self._channel = FileChannel(**channel_settings(tmp, max_event_size=1 << 20))

    def land(self, events: list[Event]) -> str:
        """Put ``events`` in one transaction and land them as one batch; its batch id."""
        with self._channel.transaction() as tx:
            tx.put_many(events)
        result = land_once(InProcessSource(self._channel, self.channel), self.landing,
                           self.spark if self.format == "parquet" else None)
        assert result.events == len(events)
        assert result.batch_id is not None
        return result.batch_id

    def curate(self, hour: pendulum.DateTime = HOUR, run_id: str = "run", **settings: Any) -> CuratedResult:
        curation = CuratedSettings(**settings).for_channel(self.channel)
        return curate_hour(self.spark, self.landing, self.curated_root, self.channel, hour, hour.add(hours=1),
                           curation, run_id=run_id)

    def table(self, **settings: Any) -> Any:
        curation = CuratedSettings(**settings).for_channel(self.channel)
        return open_curated(curation.table_format(self.format), self.curated_root, self.channel, self.landing)

    def rows(self, **settings: Any) -> list[dict[str, Any]]:
        """The curated rows, by event_time."""
        table = self.table(**settings).read_arrow()
        return sorted(table.to_pylist(), key=lambda r: (r["event_time"], r["event_id"]))

    def close(self) -> None:
        self._channel.close()
