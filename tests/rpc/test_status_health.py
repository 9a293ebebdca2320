"""The status API serves every field of checkpoint.meta and the segment health the channel checks
judge, so a check can run where the channel directories cannot be read."""

from __future__ import annotations

import os

from ingest_toolkit.channel import Event
from ingest_toolkit.channel.checkpoint import decode_meta
from ingest_toolkit.channel.proto import channel_pb2
from tests.rpc.conftest import Agent


def _evs(start: int, stop: int) -> list[Event]:
    return [Event(f"e{i}".encode()) for i in range(start, stop)]


def test_status_serves_every_checkpoint_meta_field(agent: Agent) -> None:
    client = agent.client()
    channel = agent.channels["events"]
    client.put(_evs(0, 7), channel="events")
    channel.checkpoint()
    status = client.status("events")
    fields = status["checkpoint_meta"]
    assert set(fields) == {f.name for f in channel_pb2.CheckpointMeta.DESCRIPTOR.fields}
    with open(os.path.join(channel.config.checkpoint_dir, "checkpoint.meta"), "rb") as f:
        meta = decode_meta(f.read())
    assert fields["checkpoint_id"] == meta.checkpoint_id and fields["queue_size"] == 7
    assert fields["queue_file"] == meta.queue_file and fields["queue_crc32c"] == meta.queue_crc32c
    assert fields["log_refcounts"] == {str(k): v for k, v in meta.log_refcounts.items()}
    assert fields["channel_id"] == status["live"]["channel_id"]


def test_status_serves_the_segment_health_and_sees_a_missing_segment(agent: Agent) -> None:
    client = agent.client()
    channel = agent.channels["events"]
    client.put(_evs(0, 5), channel="events")
    channel.checkpoint()
    health = client.status("events")["segments"]
    assert health["recount"]["ok"] and health["recount"]["queue_size_recounted"] == 5
    assert health["drained"]["orphaned"] == [] and health["segments"]["damaged"] == {}
    assert health["segments"]["events_referenced"] == 5
    needed = health["segments"]["needed"]
    assert needed and set(needed) <= set(health["segments"]["present"])
    data_dir = channel.config.data_dirs[0]
    os.unlink(os.path.join(data_dir, needed[0]))  # a segment lost under the running agent
    cached = client.status("events")
    assert cached["segments"]["segments"]["damaged"] == {}  # the health of a checkpoint is reused a few seconds
    channel.checkpoint()  # a new checkpoint is judged at once
    health = client.status("events")["segments"]
    assert health["segments"]["damaged"] == {os.path.join(data_dir, needed[0]): "missing"}
    assert health["segments"]["events_in_damaged_segments"] == 5


def test_status_of_a_channel_without_a_checkpoint_has_no_segment_findings(agent: Agent) -> None:
    status = agent.client().status("events")
    assert status["checkpoint_meta"] is None and status["segments"]["recount"] is None
    assert status["segments"]["segments"]["damaged"] == {}
