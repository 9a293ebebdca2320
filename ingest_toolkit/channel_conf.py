"""A channel's settings by name, from the file an operator already has.

Two kinds of file describe channels:

* an **agent configuration** (``conf/agent.toml``): one ``[channels.<name>]`` table per channel.
  It is loaded as the agent loads it (the whole file validated, ``INGEST_CHANNELS__<NAME>__<KEY>``
  overrides applied, relative paths against the current directory), so a tool finds exactly
  the directories the agent uses;
* a **channel settings file** (``conf/channel.toml``): a single ``[channel]`` table
  (``INGEST_CHANNEL__<KEY>`` overrides), for a channel used without an agent.

The operator tools (``ingest-toolkit channel ...``) and the in-process landing use
:func:`find_channel`; errors name the file and the table the user pointed at.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .channel.config import load_channel_settings
from .errors import ConfigError
from .settings import read_toml

__all__ = ["DEFAULT_AGENT_CONF", "NamedChannel", "find_channel"]

DEFAULT_AGENT_CONF = Path("conf/agent.toml")
_AGENT_TABLES = ("agent", "channels", "sources")


@dataclass(frozen=True, slots=True)
class NamedChannel:
    """Settings of one channel (``ChannelConfig`` fields) and where they were found."""

    settings: dict[str, Any]
    origin: str  # "conf/agent.toml [channels.events]": for messages
    agent_conf: Path | None  # the agent configuration that names it (None: a [channel] file)
    name: str | None = None  # its name in that agent configuration (None: a [channel] file)

    @property
    def directories(self) -> list[str]:
        return [str(self.settings["checkpoint_dir"]), *(str(d) for d in self.settings["data_dirs"])]


def find_channel(conf: Path, channel: str | None) -> NamedChannel:
    """Channel ``channel`` of ``conf`` (an agent configuration or a ``[channel]`` file).

    ``channel`` may be None when the file holds a single channel. Raises ConfigError naming the
    file and what is missing or wrong.
    """
    document = read_toml(conf, "conf")
    if any(table in document for table in _AGENT_TABLES):
        return _from_agent_conf(conf, channel)
    if "channel" in document:
        return NamedChannel(load_channel_settings(conf), f"{conf} [channel]", None)
    raise ConfigError(f"{conf} has neither [channels.<name>] tables (an agent configuration) nor a [channel] "
                      "table (a channel settings file)", key="channels")


def _from_agent_conf(conf: Path, channel: str | None) -> NamedChannel:
    from .collect.config import load_agent_config

    channels = load_agent_config(conf).channels
    if channel is None:
        if len(channels) != 1:
            raise ConfigError(f"{conf} has {len(channels)} channels ({', '.join(channels) or 'none'}): name one "
                              "with --channel", key="channels")
        channel = next(iter(channels))
    if channel not in channels:
        raise ConfigError(f"{conf} has no [channels.{channel}] table; its channels: "
                          f"{', '.join(sorted(channels)) or 'none'}", key=f"channels.{channel}")
    return NamedChannel(channels[channel].model_dump(), f"{conf} [channels.{channel}]", conf, channel)
