"""Landing failures are one line that names the cause and the fix; the trace only with --verbose.

Real failures, no mocks: a Spark write refused by the file system (a real Py4J exception with
its Java stack), a landing process without Java, a take whose agent (or channel) went away
before the rollback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.land import LandingError, land_once
from ingest_toolkit.land.diagnose import summarize
from ingest_toolkit.land.source import InProcessSource
from ingest_toolkit.land.tables import parquet as landing_module
from ingest_toolkit.rpc.client import AgentClient, RemoteSource
from ingest_toolkit.rpc.server import start_server
from ingest_toolkit.rpc.service import AgentService

from .helpers import channel_settings, landing_config, make_events, put_events

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[2]


def _cli(args: list[str], cwd: Path, env: dict[str, str | None] | None = None,
         timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``ingest-toolkit ARGS`` in a child process; ``env`` changes its environment (None: unset)."""
    environ = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value
    return subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=environ)


_NOT_ERRORS = ("WARNING: Using incubator modules",  # the JVM's own notice, before any Spark code runs
               "landing channel ",  # the command's first line: where it takes from
               "Spark started in ")  # its progress when stderr is not a terminal


def _error_lines(stderr: str) -> list[str]:
    """stderr without the lines that are not about an error (:data:`_NOT_ERRORS`)."""
    return [line for line in stderr.splitlines() if line and not line.startswith(_NOT_ERRORS)]


def _landing_dir(tmp_path: Path, events: int = 50) -> Path:
    """A channel with ``events`` events and a landing.toml that lands them in-process, in one take."""
    settings = channel_settings(tmp_path, transaction_capacity=max(events, 5000))
    with FileChannel(**settings) as channel:
        put_events(channel, make_events(events))
    table = "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())
    (tmp_path / "channel.toml").write_text("[channel]\n" + table)
    (tmp_path / "landing.toml").write_text(
        f'[landing]\nroot = "{tmp_path / "landing"}"\nchannel_conf = "{tmp_path / "channel.toml"}"\n\n'
        '[spark]\nmaster = "local[1]"\n[spark.conf]\n"spark.driver.memory" = "512m"\n')
    return tmp_path / "landing.toml"


def _block_staging(tmp_path: Path) -> None:
    """Spark cannot create the batch's staging directory: ``_staging`` is a dangling symbolic link
    (``Mkdirs failed to create``, whoever runs the test: root ignores permission bits)."""
    channel_dir = tmp_path / "landing" / "events"
    (channel_dir / "_manifests").mkdir(parents=True)
    (channel_dir / "_staging").symlink_to(tmp_path / "nowhere" / "staging")


# -- the root cause of a Spark failure ----------------------------------------------------

@pytest.mark.integration
def test_the_root_cause_of_a_failed_spark_write_is_found_in_the_java_chain(
        tmp_path: Path, spark: SparkSession) -> None:
    _block_staging(tmp_path)
    frame = spark.createDataFrame(pa.table({"a": [1, 2, 3]}))
    with pytest.raises(Exception) as info:
        frame.write.parquet(str(tmp_path / "landing" / "events" / "_staging" / "batch"))
    assert len(str(info.value).splitlines()) > 30  # what the message used to carry: the Java stack
    line = summarize(info.value)
    assert "\n" not in line and "Mkdirs failed to create" in line, line
    assert line.startswith("java.io.IOException: "), line


def test_summarize_takes_the_deepest_cause_or_the_first_line() -> None:
    java = ("An error occurred while calling o53.parquet.\n: org.apache.spark.SparkException: Job aborted.\n"
            "\tat org.apache.spark.A.b(A.scala:1)\nCaused by: org.apache.spark.SparkException: Task failed\n"
            "\tat x.y(Z.java:2)\nCaused by: java.io.IOException: No space left on device\n\tat q.r(S.java:3)\n")
    assert summarize(RuntimeError(java)) == "java.io.IOException: No space left on device"
    no_cause = "An error occurred while calling o9.save.\n: java.lang.IllegalStateException: closed\n\tat a.b(C.java:1)"
    assert summarize(RuntimeError(no_cause)) == "java.lang.IllegalStateException: closed"
    assert summarize(ValueError("plain problem\nsecond line")) == "plain problem"
    try:
        try:
            raise RuntimeError(java)
        except RuntimeError as inner:
            raise LandingError("wrapped", channel="c", phase="p", rolled_back=True) from inner
    except LandingError as outer:
        assert summarize(outer) == "java.io.IOException: No space left on device"


@pytest.mark.slow
@pytest.mark.integration
def test_a_spark_write_failure_is_one_line_and_verbose_shows_the_trace(tmp_path: Path) -> None:
    """Today's main printed 131-410 lines (Spark's task errors and the Java stack in the message)
    with the cause, ``Mkdirs failed to create``, somewhere in the middle. Two Spark starts in
    child processes: about 30 s."""
    conf = _landing_dir(tmp_path)
    _block_staging(tmp_path)
    quiet = _cli(["land", "--conf", str(conf), "--channel", "events"], tmp_path)
    assert quiet.returncode == 1
    lines = _error_lines(quiet.stderr)
    assert len(lines) == 1, quiet.stderr
    assert lines[0].startswith("Error: LandingError: landing channel 'events' failed while writing Parquet with Spark: "
                               "java.io.IOException: Mkdirs failed to create"), lines[0]
    assert "The take was rolled back" in lines[0] and lines[0].endswith("(--verbose shows the full trace)")
    verbose = _cli(["land", "--conf", str(conf), "--channel", "events", "--verbose"], tmp_path)
    assert verbose.returncode == 1
    assert "Traceback (most recent call last)" in verbose.stderr and "\tat org.apache.spark" in verbose.stderr
    assert _error_lines(verbose.stderr)[-1].startswith("Error: LandingError: ")
    with FileChannel(**channel_settings(tmp_path)) as channel:
        assert len(channel) == 50  # both runs rolled their take back


# -- no Java -------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["JAVA_HOME", "PATH"])
def test_land_without_java_says_java_17_is_needed_and_how_it_is_found(tmp_path: Path, where: str) -> None:
    """Used to be a 42-line traceback ending in [JAVA_GATEWAY_EXITED]; now one line, before any
    JVM is launched and before anything is taken."""
    conf = _landing_dir(tmp_path)
    env: dict[str, str | None] = ({"JAVA_HOME": str(tmp_path / "no-jdk")} if where == "JAVA_HOME" else
                                  {"JAVA_HOME": None, "PATH": str(tmp_path / "empty-bin")})
    done = _cli(["land", "--conf", str(conf), "--channel", "events"], tmp_path, env, timeout=60)
    assert done.returncode == 1
    lines = _error_lines(done.stderr)
    assert len(lines) == 1 and lines[0].startswith("Error: SparkStartError: Spark needs Java 17"), done.stderr
    assert ("JAVA_HOME=" + str(tmp_path / "no-jdk") if where == "JAVA_HOME" else "no java is on PATH") in lines[0]
    assert "JAVA_HOME" in lines[0] and "PATH" in lines[0] and "Traceback" not in done.stderr
    with FileChannel(**channel_settings(tmp_path)) as channel:
        assert len(channel) == 50


# -- a take that cannot be rolled back -----------------------------------------------------

def _failing_write(action: Any) -> Any:
    def write(*_args: Any) -> None:
        action()
        raise OSError(28, "No space left on device")
    return write


def test_a_remote_take_whose_agent_died_mid_landing_is_explained_truthfully(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """"Rolling the take back failed too; an agent rolls it back when the lease expires" was
    wrong when the agent died: then nothing rolls it back until the agent restarts and its
    recovery returns the events. The message now holds in both cases."""
    channel = FileChannel(**channel_settings(tmp_path))
    put_events(channel, make_events(40))
    server = start_server(AgentService({"events": channel}, lambda *_: None, default_lease_seconds=60.0,
                                       max_lease_seconds=600.0))
    client = AgentClient(server.address, timeout=5.0)

    def agent_dies() -> None:
        server.stop(grace=0)
        channel.close()

    monkeypatch.setattr(landing_module, "write_parquet", _failing_write(agent_dies))
    try:
        with pytest.raises(LandingError) as info:
            land_once(RemoteSource(client, "events", 60.0), landing_config(tmp_path / "landing"), None)  # type: ignore[arg-type]  # the write is patched
    finally:
        client.close()
    message = str(info.value)
    assert not info.value.rolled_back and "\n" not in message
    assert "No space left on device" in message and "Rolling the take back failed too (" in message
    assert "lease ends" in message
    assert "an agent that died puts the events back in the queue when it restarts" in message
    with FileChannel(**channel_settings(tmp_path)) as reopened:  # the agent's restart
        assert len(reopened) == 40


def test_an_in_process_take_that_cannot_be_rolled_back_is_not_blamed_on_an_agent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    channel = FileChannel(**channel_settings(tmp_path))
    put_events(channel, make_events(30))
    monkeypatch.setattr(landing_module, "write_parquet", _failing_write(channel.close))
    with pytest.raises(LandingError) as info:
        land_once(InProcessSource(channel, "events"), landing_config(tmp_path / "landing"), None)  # type: ignore[arg-type]  # the write is patched
    message = str(info.value)
    assert not info.value.rolled_back and "agent" not in message and "lease" not in message, message
    assert "the events are back in the queue when the channel is opened again" in message
    with FileChannel(**channel_settings(tmp_path)) as reopened:
        assert len(reopened) == 30


@pytest.mark.slow
@pytest.mark.integration
def test_a_local_landing_logs_no_spark_start_up_warnings(tmp_path: Path) -> None:
    """Even with Spark's log shown (--verbose), a local landing prints none of the warnings that
    say nothing about it: the host name resolving to a loopback address, "a task of very large
    size" (the batch is handed to Spark as local data on purpose), no native Hadoop library, the
    log-level banner. One Spark start in a child process: about 20 s."""
    conf = _landing_dir(tmp_path, events=20_000)
    done = _cli(["land", "--conf", str(conf), "--channel", "events", "--verbose"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "landed 20,000 events" in done.stdout
    for noise in ("resolves to a loopback address", "SPARK_LOCAL_IP", "task of very large size", "NativeCodeLoader",
                  "Setting default log level", "log4j profile"):
        assert noise not in done.stderr, done.stderr
    assert _error_lines(done.stderr) == [], done.stderr
