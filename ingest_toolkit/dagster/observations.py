"""The channel's state over time: observations of the channel asset.

The channel is an *observable* source asset. Its state is recorded as ``AssetObservation``s
whose numeric metadata the asset page plots (Plots tab) and whose latest one the asset graph
shows ("Observed ..." instead of "Never materialized"):

* by the sensor ``channel_observer_<c>``, every ``observe_interval_seconds`` (a runless event: no
  run, no process; it reads ``checkpoint.meta`` and lists the data directories);
* by the asset's observe function, when someone clicks Observe in the UI (a run).

Values: ``queue_depth`` (events in the queue, those in open takes included), ``committed_backlog``
(what a landing can take now), ``in_open_takes``, ``oldest_event_age_seconds``, ``checkpoint_id``
(a line that stops rising is a checkpointer that stopped), ``checkpoint_age_seconds``,
``segments`` and ``bytes_on_disk`` (the data directories), ``fill_fraction``, and the channel's
lifetime ``puts_committed`` / ``takes_committed``. Constants (``capacity``) are text, so they
are not plotted as flat lines. Everything is as of the last checkpoint (at most one
``checkpoint_interval`` old).

Only what was read is recorded: an observation of a channel whose state could not be read (an
agent not reachable yet, directories not created yet, no checkpoint yet) carries the reason as
text and no number for what it did not read, so a plot starts at the first real reading instead
of a flat line at zero from the moment ``dg dev`` started. Dagster's metadata numbers carry no
unit, so the size is also recorded as text with one (``disk_use``: ``1.6 MB``) beside the exact
``bytes_on_disk`` that the plot draws.
"""

from __future__ import annotations

import os
import time
from typing import Any

import dagster as dg

from ingest_toolkit.channel.checkpoint import CheckpointInfo
from ingest_toolkit.channel.tools.common import ChannelDirs, segments_of
from ingest_toolkit.errors import IngestError
from ingest_toolkit.numbers import byte_size, count
from ingest_toolkit.orchestrate.remote import (
    AgentAccess,
    AgentState,
    AgentUnreachable,
    LocalState,
    StateSource,
    state_source,
)
from ingest_toolkit.orchestrate.settings import ChannelSpec, OrchestrationSettings

from .naming import channel_key, observer_sensor_name

__all__ = ["build_channel_asset", "build_observer_sensor", "channel_observation", "observation_metadata"]


def _disk(spec: ChannelSpec) -> tuple[int, int] | None:
    """``(segments, bytes)`` of the channel's data directories (a segment deleted meanwhile counts 0);
    None when they do not exist (yet): nothing was read, so there is nothing to record."""
    if not all(os.path.isdir(directory) for directory in spec.data_dirs):
        return None
    segments = segments_of(ChannelDirs.of(spec.checkpoint_dir, list(spec.data_dirs)))
    total = 0
    for _log_id, path in segments:
        try:
            total += os.path.getsize(path)
        except FileNotFoundError:
            continue
    return len(segments), total


def observation_metadata(spec: ChannelSpec, info: CheckpointInfo | None, now_ns: int | None = None,
                         disk: tuple[int, int] | None = None, *, read_disk: bool = True) -> dict[str, Any]:
    """What one observation of the channel records (module docstring); ``disk``: segments and bytes
    when they are not read here (a remote channel: the agent's count, the checkpoint's log bytes);
    ``read_disk=False``: they could not be read at all (not recorded)."""
    if disk is None and read_disk:
        disk = _disk(spec)
    metadata: dict[str, Any] = {"capacity": dg.MetadataValue.text(f"{spec.capacity:,}")}
    if disk is not None:
        segments, size = disk
        metadata.update(segments=segments, bytes_on_disk=size, disk_use=dg.MetadataValue.text(byte_size(size)))
    if info is None:
        return {**metadata, "checkpoint": dg.MetadataValue.text("none yet (the channel never checkpointed)")}
    backlog = max(0, info.queue_size - info.inflight_takes)
    capacity = info.capacity or spec.capacity
    return {**metadata, "queue_depth": info.queue_size, "committed_backlog": backlog,
            "in_open_takes": info.inflight_takes,
            "oldest_event_age_seconds": round(info.backlog_age_seconds(now_ns), 1) if backlog else 0.0,
            "checkpoint_id": info.checkpoint_id, "checkpoint_age_seconds": round(info.age_seconds(now_ns), 1),
            "fill_fraction": round((info.queue_size + info.inflight_puts) / capacity, 4),
            "puts_committed": info.puts_committed, "takes_committed": info.takes_committed}


def channel_observation(spec: ChannelSpec, source: StateSource | None = None) -> tuple[dg.AssetObservation, str]:
    """An observation of the channel now, and a one-line summary of it. ``source``: where the state
    is read (default: the directories); a remote observation records ``state_from``."""
    source = source or LocalState(spec.checkpoint_dir)
    disk: tuple[int, int] | None = None
    read_disk = True
    now_ns: int | None = time.time_ns()
    try:
        info, agent_now = source.checkpoint()
        problem = None
        if isinstance(source, AgentState):
            now_ns = agent_now or now_ns
            read_disk = info is not None  # the agent's checkpoint gives the bytes: none without one
            disk = (len(source.status().get("live", {}).get("log_files", {})), info.log_bytes) if info else None
    except (IngestError, OSError) as err:
        info, problem = None, f"checkpoint.meta unreadable: {err}"
        if isinstance(err, AgentUnreachable):  # nothing was read: no number is recorded
            problem, read_disk = str(err), False
    metadata = observation_metadata(spec, info, now_ns, disk, read_disk=read_disk)
    if problem:
        metadata["checkpoint"] = dg.MetadataValue.text(problem)
    if source.remote:
        metadata["state_from"] = dg.MetadataValue.text(source.where)
    summary = (f"channel {spec.node}: {problem or 'no checkpoint yet'}" if info is None else
               f"channel {spec.node}: committed backlog {count(metadata['committed_backlog'], 'event')}, oldest "
               f"{metadata['oldest_event_age_seconds']:.0f} s old, checkpoint {info.checkpoint_id}, "
               f"{count(metadata.get('segments', 0), 'segment')}, "
               f"{byte_size(metadata.get('bytes_on_disk', 0))} on disk")
    return dg.AssetObservation(asset_key=channel_key(spec.node), metadata=metadata), summary


def build_channel_asset(spec: ChannelSpec, settings: OrchestrationSettings | None = None,
                        access: AgentAccess | None = None) -> dg.SourceAsset:
    """The channel as an observable source asset: the agent writes it, Dagster observes and checks it."""
    import warnings

    with warnings.catch_warnings():  # observable_source_asset is "beta" in Dagster 1.13
        warnings.simplefilter("ignore", dg.BetaWarning)

        @dg.observable_source_asset(
            key=channel_key(spec.node), group_name="channels", tags={"dagster/kind/wal": ""},
            description=f"Write-ahead-log file channel '{spec.name}' filled by the agent. Its state over time "
                        f"(backlog, oldest event, checkpoint, segments, bytes on disk) is recorded by the sensor "
                        f"{observer_sensor_name(spec.node)} as observations; its checks read checkpoint.meta "
                        "and the segment files without a lock.",
            metadata={"checkpoint_dir": spec.checkpoint_dir, "data_dirs": list(spec.data_dirs),
                      "capacity": dg.MetadataValue.text(f"{spec.capacity:,}"),
                      **({"agent": access.address} if access is not None else {})})
        def channel() -> dg.ObserveResult:
            mode = settings.observe if settings is not None else "auto"
            observation, _summary = channel_observation(spec, state_source(spec, access, mode))
            return dg.ObserveResult(metadata=observation.metadata)

    return channel


def build_observer_sensor(spec: ChannelSpec, settings: OrchestrationSettings,
                          access: AgentAccess | None = None) -> dg.SensorDefinition:
    """Records an observation of the channel every ``observe_interval_seconds`` (no run)."""

    @dg.sensor(name=observer_sensor_name(spec.node), minimum_interval_seconds=settings.observe_interval_seconds,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description=f"Records the state of channel {spec.name} (backlog, oldest event, checkpoint, "
                           "segments, bytes on disk) as an observation of its asset, for the asset page's plots.")
    def channel_observer(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        observation, summary = channel_observation(spec, state_source(spec, access, settings.observe))
        return dg.SensorResult(skip_reason=f"recorded an observation: {summary}", asset_events=[observation])

    return channel_observer
