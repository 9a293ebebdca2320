"""SIGKILL a real landing process (``ingest-toolkit land`` in a subprocess, its own Spark JVM) at
each phase of the protocol, then land again: every event is in the table exactly once and none is
left in the channel. The child kills itself through the documented INGEST_LAND_FAULT hook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.land import InProcessSource, land_once, read_manifests
from ingest_toolkit.land.faults import PARQUET_PHASES as PHASES

from .helpers import (
    assert_landed_exactly_once,
    channel_settings,
    landing_config,
    make_events,
    put_events,
    read_landed,
    staging_leftovers,
    wait_until,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

COMMITTED_MANIFEST = {"after_manifest", "during_moves", "before_commit", "after_commit"}


def _run_landing_child(tmp_path: Path, settings: dict[str, object], phase: str) -> subprocess.CompletedProcess[str]:
    channel_toml = tmp_path / "channel.toml"
    channel_toml.write_text("[channel]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    landing_toml = tmp_path / "landing.toml"
    landing_toml.write_text(f'[landing]\nroot = "{tmp_path / "landing"}"\nmax_events = 200\n'
                            '[spark]\nmaster = "local[2]"\n[spark.conf]\n"spark.driver.memory" = "512m"\n'
                            # A short-lived JVM starts faster with the C1 compiler only and a serial GC.
                            '"spark.driver.extraJavaOptions" = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"\n')
    marker = f"land-crash-{uuid.uuid4().hex[:12]}"  # in the child JVM's command line
    env = {**os.environ, "INGEST_LAND_FAULT": phase, "INGEST_SPARK__APP_NAME": marker}
    done = subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", "land", "--conf", str(landing_toml),
                           "--channel", "events", "--channel-conf", str(channel_toml)],
                          env=env, capture_output=True, text=True, timeout=180)
    wait_until(lambda: not _processes_with(marker), 60, f"the killed landing's JVM ({marker}) to exit")
    return done


def _processes_with(marker: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if any(marker in part for part in proc.info["cmdline"] or ()):
            found.append(proc.info["pid"])
    return found


@pytest.mark.parametrize("phase", PHASES)
def test_sigkill_at_each_phase_then_retry_lands_everything_exactly_once(tmp_path: Path, phase: str,
                                                                        spark: SparkSession) -> None:
    settings = channel_settings(tmp_path)
    ch = FileChannel(**settings)
    expected = put_events(ch, make_events(300))
    channel_id = ch.channel_id
    ch.close()

    done = _run_landing_child(tmp_path, settings, phase)
    assert done.returncode == -9, f"child was not killed at {phase}: rc={done.returncode}\n{done.stderr[-3000:]}"

    root = tmp_path / "landing"
    manifests = read_manifests(str(root), "events")
    assert [m.count for m in manifests] == ([200] if phase in COMMITTED_MANIFEST else [])
    if phase in ("during_write", "after_write"):  # tell the two apart by what Spark left in staging:
        # its job commit writes _SUCCESS (the orphaned JVM may or may not clean _temporary up)
        committed = [d.name for d in (root / "events" / "_staging").glob("*") if (d / "_SUCCESS").exists()]
        assert len(committed) == (0 if phase == "during_write" else 1), committed
    ch = FileChannel(**settings)
    try:
        assert len(ch) == (100 if phase == "after_commit" else 300)  # the take committed only at the end
        config = landing_config(root, max_events=1000, staging_grace_seconds=0)
        result = land_once(InProcessSource(ch, "events"), config, spark)
        assert result.redelivered == (200 if phase in COMMITTED_MANIFEST - {"after_commit"} else 0)
        assert result.events + result.redelivered == result.taken and len(ch) == 0
    finally:
        ch.close()
    assert_landed_exactly_once(read_landed(root, "events"), expected, channel_id)
    assert staging_leftovers(root, "events") == []
    assert sum(m.count for m in read_manifests(str(root), "events")) == 300
