"""SIGKILL a real ``ingest-toolkit land --format delta|iceberg`` process at each phase of the
protocol (the documented INGEST_LAND_FAULT hook), then land again: every event is in the table
exactly once, no partial batch was ever visible to the format's own reader, and the channel is
empty. No Spark: these tables are written by delta-rs and PyIceberg, so each child lives about a
second."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.land import InProcessSource, land_once
from ingest_toolkit.land.faults import TABLE_PHASES

from .helpers import assert_landed_exactly_once, channel_settings, make_events, put_events
from .tables import FORMATS, committed_batches, format_config, read_table, whole_batches

pytestmark = pytest.mark.integration

COMMITTED = {"after_table_commit", "before_commit", "after_commit"}


def _land_child(tmp_path: Path, settings: dict[str, object], table_format: str, phase: str,
                ) -> subprocess.CompletedProcess[str]:
    channel_toml = tmp_path / "channel.toml"
    channel_toml.write_text("[channel]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    config = format_config(tmp_path / "landing", table_format)
    landing_toml = tmp_path / "landing.toml"
    landing_toml.write_text(f'[landing]\nroot = "{tmp_path / "landing"}"\nmax_events = 200\n'
                            f'iceberg_catalog = "{config.iceberg_catalog}"\n')
    return subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", "land", "--conf", str(landing_toml),
                           "--format", table_format, "--channel", "events", "--channel-conf", str(channel_toml)],
                          env={**os.environ, "INGEST_LAND_FAULT": phase}, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("table_format", FORMATS)
@pytest.mark.parametrize("phase", TABLE_PHASES)
def test_sigkill_at_each_phase_then_retry_lands_everything_exactly_once(tmp_path: Path, table_format: str,
                                                                        phase: str) -> None:
    settings = channel_settings(tmp_path)
    with FileChannel(**settings) as channel:
        expected = put_events(channel, make_events(300))
        channel_id = channel.channel_id

    done = _land_child(tmp_path, settings, table_format, phase)
    assert done.returncode == -9, f"not killed at {phase}: rc={done.returncode}\n{done.stderr[-3000:]}"

    config = format_config(tmp_path / "landing", table_format, max_events=1000)
    landed = read_table(config, "events")
    # during_write: the library writes the data files and then commits; the kill lands in between,
    # or (when the probe saw no file before the call returned) right after the commit
    committed = phase in COMMITTED or (phase == "during_write" and landed.num_rows > 0)
    assert landed.num_rows == (200 if committed else 0)
    if landed.num_rows:
        whole_batches(landed, committed_batches(config, "events"))
    with FileChannel(**settings) as channel:
        assert len(channel) == (100 if phase == "after_commit" else 300)  # the take committed only at the end
        result = land_once(InProcessSource(channel, "events"), config, None)
        assert result.redelivered == (200 if committed and phase != "after_commit" else 0)
        assert result.events + result.redelivered == result.taken and len(channel) == 0
    rows = read_table(config, "events")
    assert_landed_exactly_once(rows, expected, channel_id)
    whole_batches(rows, committed_batches(config, "events"))
