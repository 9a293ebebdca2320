"""``ingest-toolkit hdfs``: fetch the Hadoop jars, run a single-node HDFS on 127.0.0.1."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

import click

from ..errors import ConfigError
from ..numbers import count
from .cluster import HdfsClusterError, MiniHdfs
from .control import PendingReply
from .jars import cache_dir, fetch, hadoop_version

__all__ = ["hdfs_command"]


@click.group("hdfs")
def hdfs_command() -> None:
    """A local HDFS (Hadoop's MiniDFSCluster) for trying and testing the landing on hdfs://."""


@hdfs_command.command("fetch")
@click.option("--s3", "with_s3", is_flag=True, help="Also fetch hadoop-aws and the AWS SDK bundle (about 700 MB) "
              "for s3a:// landing roots.")
def fetch_command(with_s3: bool) -> None:
    """Fetch the jars with Maven (cached; offline when everything is in Maven's repository) and
    compile the cluster's main class."""
    started = time.monotonic()
    found = fetch(("hdfs", "s3") if with_s3 else ("hdfs",))
    for kind, jars in found.items():
        click.echo(f"{kind}: {count(len(jars), 'classpath entry')} (Hadoop {hadoop_version()})")
    click.echo(f"cache: {cache_dir()} ({time.monotonic() - started:.0f} s)")


@hdfs_command.command("start")
@click.option("--data", "data_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory for the NameNode's metadata and the DataNodes' blocks (created; reused when it "
                   "holds an earlier cluster's data).")
@click.option("--port", default=8020, show_default=True, help="NameNode RPC port on 127.0.0.1 (0: any free port).")
@click.option("--http-port", default=0, show_default=True, help="NameNode web UI port (0: any free port).")
@click.option("--datanodes", default=1, show_default=True, type=click.IntRange(1, 8), help="Number of DataNodes.")
@click.option("--conf", "conf_pairs", multiple=True, metavar="KEY=VALUE",
              help="Any Hadoop setting of the cluster (repeatable), e.g. dfs.replication=1: the cluster's "
                   "default, which <data>/client-conf passes on to clients (a file gets its writer's).")
def start_command(data_dir: Path, port: int, http_port: int, datanodes: int, conf_pairs: tuple[str, ...]) -> None:
    """Start a NameNode and DATANODES DataNodes in one JVM and serve until SIGTERM or Ctrl-C.

    Control commands can be typed on stdin (status, stop-datanode I, start-datanode I,
    safemode enter|leave|get, stop-namenode, start-namenode); each answers with one JSON line.
    They take effect in the order typed; one that waits (a restart) answers when done, and the
    commands after it answer meanwhile."""
    conf = dict(_pair(p) for p in conf_pairs)
    click.echo(f"starting HDFS (Hadoop {hadoop_version()}) with data in {data_dir.resolve()} ...")
    cluster = MiniHdfs.start(data_dir, port=port, http_port=http_port, datanodes=datanodes, conf=conf)
    info = cluster.info
    click.echo(f"HDFS ready: {info.uri}  (pid {info.pid})")
    click.echo(f"  NameNode web UI: {info.namenode_http}")
    for node in info.datanodes:
        click.echo(f"  DataNode {node['index']}: data port {node['xfer_port']}, web {node['http_port']}, "
                   f"ipc {node['ipc_port']}")
    click.echo(f"  log: {cluster.log}")
    click.echo(f"  client settings: HADOOP_CONF_DIR={cluster.client_conf} (dfs.replication={info.replication}: a file "
               "gets the replication of the client that writes it)")
    click.echo(f"  land into it: HADOOP_CONF_DIR={cluster.client_conf} INGEST_LANDING__ROOT={info.uri}/landing "
               "ingest-toolkit land --channel events")
    click.echo("stop with Ctrl-C or SIGTERM")
    _serve(cluster)


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"--conf {text!r}: expected KEY=VALUE, e.g. dfs.replication=1", key="conf")
    return key, value


def _serve(cluster: MiniHdfs) -> None:
    """Forward stdin commands until a signal or the cluster's exit; then stop it cleanly."""
    stop = threading.Event()

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threading.Thread(target=_forward_stdin, args=(cluster, stop), name="hdfs-stdin", daemon=True).start()
    while not stop.wait(0.5):
        if cluster.process.poll() is not None:
            raise HdfsClusterError(f"the HDFS process exited with code {cluster.process.returncode}; "
                                   f"see {cluster.log}")
    code = cluster.stop()
    click.echo(f"HDFS stopped (exit code {code}); data kept in {cluster.info.data_dir}")


def _forward_stdin(cluster: MiniHdfs, stop: threading.Event) -> None:
    """Send each line at once, in order; each reply is printed (one JSON line) when it comes, so a
    command that waits (a restart) does not hold up the ones typed after it."""
    for line in sys.stdin:
        if stop.is_set():
            return
        if line.strip():
            try:
                pending = cluster.send(line.strip())
            except HdfsClusterError as err:
                click.echo(f"error: {err}", err=True)
                continue
            threading.Thread(target=_print_reply, args=(cluster, pending), name="hdfs-reply", daemon=True).start()


_print_lock = threading.Lock()


def _print_reply(cluster: MiniHdfs, pending: PendingReply) -> None:
    try:
        reply = cluster.reply(pending)
    except HdfsClusterError as err:
        with _print_lock:
            click.echo(f"error: {err}", err=True)
        return
    with _print_lock:
        click.echo(json.dumps(reply))
