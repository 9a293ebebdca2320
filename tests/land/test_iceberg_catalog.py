"""The Iceberg table's SQL catalog: SQLite by default (no server; several writers on one host),
PostgreSQL for writers on several hosts. Landings in several processes racing into one table
through each catalog commit every event once (issue 29, item 3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.land import LandingConfig, SparkSettings

from ..postgres import postgres_server
from .helpers import assert_landed_exactly_once, channel_settings, make_events, put_events
from .tables import read_table

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with postgres_server() as url:
        yield url


def _lander(tmp_path: Path, host: str, catalog: str) -> subprocess.Popen[str]:
    """``ingest-toolkit land --drain`` of channel ``events`` on ``host`` into the shared table."""
    settings = channel_settings(tmp_path / host)
    channel_toml = tmp_path / host / "channel.toml"
    channel_toml.write_text("[channel]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    landing_toml = tmp_path / host / "landing.toml"
    landing_toml.write_text(f'[landing]\nroot = "{tmp_path / "landing"}"\nmax_events = 150\nformat = "iceberg"\n'
                            f'iceberg_catalog = "{catalog}"\n')
    return subprocess.Popen([sys.executable, "-m", "ingest_toolkit.cli", "land", "--conf", str(landing_toml),
                             "--channel", "events", "--channel-conf", str(channel_toml), "--drain"],
                            env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("catalog", ["sqlite", "postgresql"])
def test_landings_of_several_processes_share_one_table_through_the_catalog(tmp_path: Path, catalog: str,
                                                                           request: pytest.FixtureRequest) -> None:
    url = f"sqlite:///{tmp_path / 'catalog.db'}" if catalog == "sqlite" else request.getfixturevalue("postgres")
    expected, ids = [], []
    for host in ("agg1", "agg2", "agg3"):
        with FileChannel(**channel_settings(tmp_path / host)) as channel:
            expected.append(put_events(channel, make_events(600)))
            ids.append(channel.channel_id)
    landers = [_lander(tmp_path, host, url) for host in ("agg1", "agg2", "agg3")]
    for lander in landers:
        _out, err = lander.communicate(timeout=300)
        assert lander.returncode == 0, err[-3000:]
    config = LandingConfig.build(root=str(tmp_path / "landing"), format="iceberg", iceberg_catalog=url,
                                 spark=SparkSettings())
    rows = read_table(config, "events")
    assert rows.num_rows == 3 * 600
    for wanted, channel_id in zip(expected, ids, strict=True):
        mine = rows.filter([e.startswith(channel_id.hex()) for e in rows.column("event_id").to_pylist()])
        assert_landed_exactly_once(mine, wanted, channel_id)
