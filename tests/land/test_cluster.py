"""Landing on a real Spark standalone cluster (master + one worker on 127.0.0.1, started with
pyspark's own ``spark-class``): the driver talks to executors in other JVMs, which write the files."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from ingest_toolkit.channel import FileChannel

from .helpers import assert_landed_exactly_once, channel_settings, make_events, put_events, read_landed, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPARK_HOME = Path(pyspark.__file__).parent
JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _spawn(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)  # own process group: executors die with it


def _stop(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever the group still holds (executors)
    except ProcessLookupError:
        pass


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "SPARK_DAEMON_JAVA_OPTS": JVM_OPTS, "SPARK_DAEMON_MEMORY": "256m"}
    procs = []
    try:
        master_log = tmp_path / "master.log"
        procs.append(_spawn(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
                             "--webui-port", "0"], master_log, env))
        wait_until(lambda: "Starting Spark master at" in master_log.read_text(errors="replace"), 90, "the master")
        url = re.search(r"Starting Spark master at (spark://[\d.]+:\d+)", master_log.read_text()).group(1)  # type: ignore[union-attr]
        work = tmp_path / "work"
        worker_log = tmp_path / "worker.log"
        procs.append(_spawn(["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "2",
                             "--memory", "1g", "--webui-port", "0", "--work-dir", str(work), url], worker_log, env))
        wait_until(lambda: "Successfully registered with master" in worker_log.read_text(errors="replace"), 90,
                   "the worker to register")
        yield url, work
    finally:
        for proc in reversed(procs):
            _stop(proc)


def test_lands_through_a_standalone_cluster(tmp_path: Path, cluster: tuple[str, Path]) -> None:
    url, work = cluster
    settings = channel_settings(tmp_path)
    ch = FileChannel(**settings)
    expected = put_events(ch, make_events(2000))
    channel_id = ch.channel_id
    ch.close()
    channel_toml = tmp_path / "channel.toml"
    channel_toml.write_text("[channel]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    landing_toml = tmp_path / "landing.toml"
    landing_toml.write_text(
        f'[landing]\nroot = "{tmp_path / "landing"}"\nmax_events = 1500\n[spark]\nmaster = "{url}"\n[spark.conf]\n'
        '"spark.driver.memory" = "512m"\n"spark.executor.memory" = "512m"\n"spark.cores.max" = "2"\n'
        f'"spark.driver.host" = "127.0.0.1"\n"spark.driver.extraJavaOptions" = "{JVM_OPTS}"\n')
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", "land", "--conf", str(landing_toml),
                           "--channel", "events", "--channel-conf", str(channel_toml), "--drain", "--json"],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    document = json.loads(done.stdout)
    assert sorted(r["events"] for r in document["runs"] if r["taken"]) == [500, 1500], document
    assert any(work.glob("app-*/*/stderr")), "no executor ran on the worker"
    assert_landed_exactly_once(read_landed(tmp_path / "landing", "events"), expected, channel_id)
    assert time.monotonic() - started < 240
