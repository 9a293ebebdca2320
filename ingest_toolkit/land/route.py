"""Where a landing takes from: the channel opened in-process, or the agent that owns it.

:func:`resolve_route` decides, in this order:

1. An agent address is configured (``[landing] agent``, ``INGEST_LANDING__AGENT``, ``--agent``,
   ``--ports-file``): take through it (leased remote takes).
2. Otherwise the channel's settings are looked up (``[landing] channel_conf``, or the
   ``[channels.<name>]`` table of ``[landing] agent_conf``). When no process holds the channel's
   lock, the landing opens it in-process.
3. When a live process holds it, the landing takes through the agent that owns it: the agent
   configuration naming the channel gives the agent's ports file (``[agent] ports_file``, which a
   running agent writes), whose gRPC port is used only if the record holds up
   (:mod:`ingest_toolkit.agent_ports`: it names the lock's holder, no other user can have
   planted it, only the port comes from it). The connection uses the TLS and token settings of
   the landing configuration, else those of the agent configuration (its token variable; its
   own certificate as the trusted CA of a self-signed setup).

   The route carries a one-line notice naming the agent, its pid, the endpoint and the file it
   came from; the CLI prints it and the Dagster asset logs it.

Anything else (an owner that is not an agent this configuration describes, a missing or
untrustworthy ports file) is a ConfigError that names the fix: give ``--agent host:port`` or
``--ports-file``, or set ``[landing] agent``.

A remote route carries the channel's :class:`Identity` when the landing's configuration knows it:
the channel of the owner's configuration (3), or, for a configured agent (1), the channel that
``[landing] agent_conf`` / ``channel_conf`` names when the landing's file (or ``--channel-conf``)
sets one of them. Before anything is taken, the agent must serve the channel under that id
(:func:`ingest_toolkit.land.run.land_channel`); another agent's channel of the same name is
refused (:class:`~ingest_toolkit.collect.errors.WrongAgentError`), as ``send`` refuses it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..agent_ports import endpoint, owner_port, shown
from ..channel.lock import lock_holder
from ..channel.tools.common import read_channel_id
from ..channel_conf import NamedChannel, find_channel
from ..errors import ConfigError
from .config import LandingConfig

if TYPE_CHECKING:
    from ..collect.config import AgentConfig

__all__ = ["Identity", "Route", "ports_file_address", "resolve_route"]

_FIX = "give --agent host:port or --ports-file, or set [landing] agent (INGEST_LANDING__AGENT)"


@dataclass(frozen=True)
class Identity:
    """The channel a remote route must reach: its id (``channel.id``, a UUID string), where the
    configuration describes it, and its checkpoint directory (for messages)."""

    channel_id: str
    origin: str  # "conf/agent.toml [channels.events]"
    checkpoint_dir: str


@dataclass(frozen=True)
class Route:
    """How one landing reaches channel ``channel``. ``settings`` (ChannelConfig fields) for an
    in-process route, else None and ``config.agent`` is the agent to take through, which must
    serve the channel ``identity`` names (None: nothing to check it against)."""

    channel: str
    config: LandingConfig
    settings: dict[str, Any] | None
    description: str  # "in-process (conf/agent.toml [channels.events])", "agent 127.0.0.1:7431 (...)"
    notice: str | None = None  # tell the user: an endpoint that was discovered, not configured
    identity: Identity | None = None

    @property
    def remote(self) -> bool:
        return self.settings is None


def resolve_route(config: LandingConfig, channel: str, named: NamedChannel | None = None) -> Route:
    """The route of a landing of ``channel`` (module docstring). ``named``: the channel's settings
    when the caller has them (the Dagster definitions), else they are looked up from ``config``."""
    if config.agent:
        return Route(channel, config, None, f"agent {config.agent}", identity=_configured_identity(config, channel))
    named = named or _named_channel(config, channel)
    owner = lock_holder(str(named.settings["checkpoint_dir"]))
    if owner is None:
        return Route(channel, config, named.settings, f"in-process ({named.origin})")
    return _through_owner(config, channel, named, owner)


def _configured_identity(config: LandingConfig, channel: str) -> Identity | None:
    """The identity a configured agent must match: the channel ``agent_conf`` or ``channel_conf``
    describes, when the landing's configuration sets one of them (a default names no agent)."""
    if not {"agent_conf", "channel_conf"} & config.model_fields_set:
        return None
    try:
        return _identity(_named_channel(config, channel))
    except ConfigError:
        return None  # the file does not describe this channel: nothing to compare with


def _identity(named: NamedChannel) -> Identity | None:
    checkpoint_dir = str(named.settings["checkpoint_dir"])
    channel_id = read_channel_id(checkpoint_dir)[0]
    return Identity(channel_id, named.origin, checkpoint_dir) if channel_id else None


def _named_channel(config: LandingConfig, channel: str) -> NamedChannel:
    if config.channel_conf:
        return find_channel(Path(config.channel_conf), channel)
    if config.agent_conf and Path(config.agent_conf).exists():
        return find_channel(Path(config.agent_conf), channel)
    raise ConfigError("no channel settings for the landing: set [landing] agent_conf (the agent configuration "
                      "naming the channel) or channel_conf, give --channel-conf, or set [landing] agent to take "
                      "through an agent", key="landing.agent_conf")


def _through_owner(config: LandingConfig, channel: str, named: NamedChannel, owner: int) -> Route:
    owned = f"channel {channel!r} ({named.origin}) is owned by process {owner}"
    agent_conf = named.agent_conf or (Path(config.agent_conf) if config.agent_conf else None)
    if agent_conf is None or not agent_conf.exists():
        raise ConfigError(f"{owned}, and no agent configuration names it to find that agent's endpoint: {_FIX}",
                          key="landing.agent")
    from ..collect.config import load_agent_config

    agent = load_agent_config(agent_conf)
    spec = agent.channels.get(channel)
    if spec is None or not _same_dir(spec.checkpoint_dir, str(named.settings["checkpoint_dir"])):
        raise ConfigError(f"{owned}, which {agent_conf} does not describe as [channels.{channel}]: {_FIX}",
                          key="landing.agent")
    ports_path = agent.agent.ports_path
    port = owner_port(ports_path, owner, owned, "grpc", _FIX)
    address = endpoint(agent.agent.grpc.host, port)
    routed = config.model_copy(update={"agent": address, **_security(config, agent)})
    tls = " over TLS" if routed.agent_tls_ca or routed.agent_tls_cert else ""
    notice = (f"channel {channel!r} is owned by agent {agent.agent.name!r} (pid {owner}): landing through its "
              f"gRPC endpoint {address}{tls} (port from {shown(ports_path)})")
    return Route(channel, routed, None, f"agent {address} (pid {owner}, {ports_path})", notice, _identity(named))


def _same_dir(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _security(config: LandingConfig, agent: AgentConfig) -> dict[str, Any]:
    """TLS and token settings for a discovered agent: the landing's own, else the agent's."""
    security = agent.agent.security
    updates: dict[str, Any] = {}
    if config.agent_token_env is None and security.token_env:
        updates["agent_token_env"] = security.token_env
    if security.tls is not None and config.agent_tls_ca is None:
        updates["agent_tls_ca"] = str(security.tls.cert_file)  # a self-signed agent certificate
    return updates


def ports_file_address(path: Path) -> str:
    """``127.0.0.1:<grpc port>`` from an agent's ports file (``land --ports-file``, read as ``send``
    reads it: :func:`ingest_toolkit.collect.locate.read_ports_file`)."""
    from ..collect.locate import read_ports_file

    port = read_ports_file(path).get("grpc")
    if not isinstance(port, int):
        raise ConfigError(f"--ports-file {path}: the agent has no gRPC endpoint", key="ports_file")
    return f"127.0.0.1:{port}"
