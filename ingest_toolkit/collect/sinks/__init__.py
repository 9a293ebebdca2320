"""Sinks: what empties an agent's channel into another agent (see :mod:`.forward`).

``build_sink_groups(config, channels)`` makes one :class:`SinkGroup` per ``[sink_groups.<name>]``
and one per sink that no group names (a group of one, named like the sink).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ...channel import FileChannel
from .forward import Downstream, Outcome, add_hop, forward_batch_id, split_parts
from .group import SinkGroup
from .inflight import InFlight
from .processors import Failover, LoadBalance, build_processor
from .settings import DEFAULT_HOP_HEADER, ForwardSinkSettings, SinkGroupSettings

__all__ = ["DEFAULT_HOP_HEADER", "Downstream", "Failover", "ForwardSinkSettings", "InFlight", "LoadBalance",
           "Outcome", "SinkGroup", "SinkGroupSettings", "add_hop", "build_sink_groups", "effective_groups",
           "forward_batch_id", "split_parts"]


def effective_groups(sinks: Mapping[str, ForwardSinkSettings],
                     groups: Mapping[str, SinkGroupSettings]) -> dict[str, SinkGroupSettings]:
    """The configured groups plus a group of one for every sink no group names."""
    grouped = {name for group in groups.values() for name in group.sinks}
    out = dict(groups)
    for name in sinks:
        if name not in grouped:
            out[name] = SinkGroupSettings(sinks=[name])
    return out


def build_sink_groups(sinks: Mapping[str, ForwardSinkSettings], groups: Mapping[str, SinkGroupSettings],
                      channels: Mapping[str, FileChannel], state_dir: Path) -> dict[str, SinkGroup]:
    built: dict[str, SinkGroup] = {}
    try:
        for name, group in effective_groups(sinks, groups).items():
            members = []
            for sink in group.sinks:
                members.append(Downstream(sink, sinks[sink]))
            processor = build_processor(group.processor, priorities=group.priorities, order=group.sinks,
                                        selector=group.selector)
            channel = channels[sinks[group.sinks[0]].channel]
            built[name] = SinkGroup(name, channel, members, processor, state_dir / name,
                                    min_penalty=group.min_penalty, max_penalty=group.max_penalty,
                                    release_in_doubt_after=group.release_in_doubt_after,
                                    unreachable_after=group.unreachable_after)
    except BaseException:
        for group_built in built.values():
            group_built.stop(0)
        raise
    return built
