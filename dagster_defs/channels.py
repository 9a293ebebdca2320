"""The channels to orchestrate: the ``[channels.<name>]`` tables of the agent configuration."""

from __future__ import annotations

from pathlib import Path

from ingest_toolkit.collect.config import load_agent_config

from .settings import ChannelSpec

__all__ = ["load_channel_specs"]


def load_channel_specs(agent_conf: str | Path) -> list[ChannelSpec]:
    """One :class:`ChannelSpec` per ``[channels.<name>]`` table, in file order.

    The whole file is validated by :func:`load_agent_config` (its errors name the key path,
    e.g. ``channels.events.capacity``; ``INGEST_CHANNELS__<NAME>__<KEY>`` overrides apply), so a
    bad channel stops the definitions from loading with a message that says what to fix, instead
    of failing later inside a run. Relative directories are resolved against the current
    directory, as the agent resolves them.
    """
    config = load_agent_config(agent_conf)
    return [ChannelSpec(name=name, checkpoint_dir=channel.checkpoint_dir, data_dirs=tuple(channel.data_dirs),
                        capacity=channel.capacity, checkpoint_interval=channel.checkpoint_interval,
                        settings=channel.model_dump(), agent_conf=str(agent_conf))
            for name, channel in config.channels.items()]
