"""Landing through Spark Connect: a real Connect server (pyspark's own ``spark-submit`` with the
bundled ``SparkConnectServer``, on 127.0.0.1) and ``ingest-toolkit land`` with ``remote = sc://``.

The landing process has no JVM then: the Arrow table travels in the Connect plan, the server's
Spark writes the files, and manifests and moves go through ``pyarrow.fs`` (``storage = auto``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from ingest_toolkit.channel import FileChannel

from .helpers import assert_landed_exactly_once, channel_settings, make_events, put_events, read_landed, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPARK_HOME = Path(pyspark.__file__).parent
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"  # bundled in pyspark's jars


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def connect_server(tmp_path: Path) -> Iterator[str]:
    pytest.importorskip("pandas", reason="the Spark Connect client needs pyspark[connect]")
    port = _free_port()
    log = tmp_path / "connect.log"
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", "local[2]",
             "--driver-memory", "512m", "--conf", "spark.ui.enabled=false",
             "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
             "--conf", f"spark.connect.grpc.binding.port={port}",
             "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_until(lambda: "Spark Connect server started" in log.read_text(errors="replace") or proc.poll() is not None,
                   120, "the Spark Connect server")
        assert proc.poll() is None, log.read_text(errors="replace")[-4000:]
        yield f"sc://127.0.0.1:{port}"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)


def _land(tmp_path: Path, remote: str, root: Path, channel_toml: Path) -> subprocess.CompletedProcess[str]:
    landing_toml = tmp_path / f"landing-{root.name}.toml"
    landing_toml.write_text(f'[landing]\nroot = "{root}"\nmax_events = 1500\nchannel_conf = "{channel_toml}"\n'
                            f'[spark]\nremote = "{remote}"\n')
    return subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", "land", "--conf", str(landing_toml),
                           "--channel", "events", "--drain", "--json"], capture_output=True, text=True, timeout=240)


def test_lands_through_spark_connect_and_a_failure_loses_nothing(tmp_path: Path, connect_server: str) -> None:
    settings = channel_settings(tmp_path)
    ch = FileChannel(**settings)
    expected = put_events(ch, make_events(2000))
    channel_id = ch.channel_id
    ch.close()
    channel_toml = tmp_path / "channel.toml"
    channel_toml.write_text("[channel]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))

    # A root that cannot be written is refused before the take (the checks before the first take),
    # the channel untouched.
    (tmp_path / "blocker").write_text("a file where the landing root's parent should be")
    failed = _land(tmp_path, connect_server, tmp_path / "blocker" / "landing", channel_toml)
    assert failed.returncode == 1 and "PreflightError" in failed.stderr, failed.stderr[-4000:]
    assert "nothing was taken" in failed.stderr
    ch = FileChannel(**settings)
    assert len(ch) == 2000  # nothing lost, nothing half-taken
    ch.close()

    done = _land(tmp_path, connect_server, tmp_path / "landing", channel_toml)
    assert done.returncode == 0, done.stderr[-4000:]
    runs = [r for r in json.loads(done.stdout)["runs"] if r["taken"]]
    assert sorted(r["events"] for r in runs) == [500, 1500], runs
    assert all(r["manifest_uri"].startswith("file://") for r in runs)
    assert_landed_exactly_once(read_landed(tmp_path / "landing", "events"), expected, channel_id)
    ch = FileChannel(**settings)
    assert len(ch) == 0
    ch.close()
