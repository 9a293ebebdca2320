"""How a client command (``send``, ``land``, ``status``, the channel tools) finds the agent it talks
to, and makes sure it is the agent it means.

In this order:

1. a flag names it: ``--agent host:port`` (gRPC; ``send`` also reads ``INGEST_AGENT_ADDRESS``),
   ``--admin host:port`` (the admin endpoint), ``--ports-file FILE`` (an agent's ports file: its
   ports, on 127.0.0.1), or ``[landing] agent`` for a landing;
2. else the agent configuration: ``--conf``, by default ``conf/agent.toml`` when that file exists.
   The agent is the process that holds the lock of the configuration's ``state_dir``; its ports
   come from its ports file only when that file names that very process and no other user can
   have written it (:func:`ingest_toolkit.agent_ports.owner_port`); the hosts, the token variable
   and the TLS certificate come from the configuration;
3. else, with no configuration in the current directory, the default address ``127.0.0.1:7431``
   (admin ``127.0.0.1:7432``).

A configuration whose agent is not running (no process holds its state directory) is an error,
never a fall back to the default address: that address may be another deployment's agent, which
is how ``send`` once delivered into the wrong one.

**Identity.** When the configuration takes part (step 2, or ``--conf`` given together with a
flag), the agent that answers must be the configuration's: every channel of the configuration
whose id is known (``channel.id`` in its ``checkpoint_dir``, written when the channel was first
opened) must be served by that agent under the same name with that very id.
:func:`check_identity` raises :class:`WrongAgentError` otherwise, naming both ids and the fix.
Every command says which agent it used: :meth:`AgentTarget.describe`.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..agent_ports import endpoint, owner_port, shown
from ..channel.lock import lock_holder
from ..channel.tools.common import read_channel_id
from ..channel_conf import DEFAULT_AGENT_CONF
from ..errors import ConfigError
from .config import AgentConfig, load_agent_config
from .errors import WrongAgentError

if TYPE_CHECKING:
    from ..rpc.client import AgentClient

__all__ = ["DEFAULT_ADMIN", "DEFAULT_GRPC", "AgentTarget", "WrongAgentError", "check_identity", "expected_ids",
           "find_agent", "grpc_channel_ids", "mismatch", "read_ports_file", "same_id", "token_from_env"]

DEFAULT_GRPC = "127.0.0.1:7431"
DEFAULT_ADMIN = "127.0.0.1:7432"
Endpoint = Literal["grpc", "admin"]
_FLAG = {"grpc": "--agent host:port", "admin": "--admin host:port"}


@dataclass(frozen=True)
class AgentTarget:
    """The agent a command talks to. ``grpc`` / ``admin``: ``host:port`` (None: unknown or
    disabled). ``how``: where the address came from, for the notice. ``config``: the agent
    configuration it must match (None: nothing to check it against). ``token_env`` / ``tls_ca``:
    what the configuration says a client of that endpoint needs (None: nothing)."""

    grpc: str | None
    admin: str | None
    how: str
    name: str | None = None
    pid: int | None = None
    config: AgentConfig | None = None
    token_env: str | None = None
    tls_ca: str | None = None
    flag: str | None = None  # the option that named the agent ("--agent", ...); None: the configuration

    def describe(self, kind: Endpoint = "grpc") -> str:
        """``agent 'local' (pid 4121) at 127.0.0.1:40111 (port from var/agent/ports.json)``."""
        who = f"agent {self.name!r}" if self.name else "the agent"
        pid = f" (pid {self.pid})" if self.pid else ""
        return f"{who}{pid} at {self.grpc if kind == 'grpc' else self.admin} ({self.how})"


def find_agent(conf: Path | None = None, *, grpc: str | None = None, admin: str | None = None,
               ports_file: Path | None = None, need: Endpoint = "grpc", grpc_flag: str = "--agent") -> AgentTarget:
    """The agent to talk to (module docstring): ``grpc``, ``admin``, ``ports_file`` are the flags,
    ``conf`` the ``--conf`` option (None: ``conf/agent.toml`` if it exists); ``need``: the endpoint
    the command uses, which must be known; ``grpc_flag``: how the user gave ``grpc`` (for messages:
    ``INGEST_AGENT_ADDRESS``). Raises ConfigError naming the cause and the fix."""
    path = conf or DEFAULT_AGENT_CONF
    config = load_agent_config(path) if conf is not None or path.exists() else None
    if grpc or admin or ports_file:
        target = _from_flags(grpc, admin, ports_file, grpc_flag)
        return _with_security(target, config, need) if conf is not None and config is not None else target
    if config is not None:
        return _from_configuration(config, path, need)
    return AgentTarget(DEFAULT_GRPC, DEFAULT_ADMIN, f"the default address: there is no {DEFAULT_AGENT_CONF} here",
                       flag="the default address")


def _from_flags(grpc: str | None, admin: str | None, ports_file: Path | None, grpc_flag: str) -> AgentTarget:
    if ports_file is None:
        flag = grpc_flag if grpc else "--admin"
        return AgentTarget(grpc, admin, f"given by {flag}", flag=flag)
    record = read_ports_file(ports_file)
    ports = {kind: record.get(kind) for kind in ("grpc", "admin")}
    grpc = grpc or (f"127.0.0.1:{ports['grpc']}" if isinstance(ports["grpc"], int) else None)
    admin = admin or (f"127.0.0.1:{ports['admin']}" if isinstance(ports["admin"], int) else None)
    name = record.get("agent") if isinstance(record.get("agent"), str) else None
    pid = record.get("pid") if isinstance(record.get("pid"), int) else None
    return AgentTarget(grpc, admin, f"ports from --ports-file {ports_file}", name, pid, flag="--ports-file")


def read_ports_file(path: Path) -> dict[str, Any]:
    """An agent's ports file given as ``--ports-file`` (no trust checks: the user named it)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"--ports-file {path}: cannot read the agent's ports ({err}); give the ports file of a "
                          "running agent ([agent] ports_file of its configuration)", key="ports_file") from None
    if not isinstance(record, dict):
        raise ConfigError(f"--ports-file {path} is not an agent's ports file", key="ports_file")
    return record


def _from_configuration(config: AgentConfig, path: Path, need: Endpoint) -> AgentTarget:
    settings = config.agent
    holder = lock_holder(str(settings.state_dir))
    if holder is None:
        raise ConfigError(f"the agent of {path} is not running (no process holds its state directory "
                          f"{shown(settings.state_dir)}): start it (ingest-toolkit agent --conf {path}), or give "
                          f"{_FLAG[need]} to use another agent", key="agent.state_dir")
    owned = f"the agent of {path} runs as process {holder}"
    fix = f"restart that agent, or give {_FLAG[need]}"
    ports = {need: owner_port(settings.ports_path, holder, owned, need, fix)}
    other: Endpoint = "admin" if need == "grpc" else "grpc"
    try:
        ports[other] = owner_port(settings.ports_path, holder, owned, other, fix)
    except ConfigError:
        pass  # that endpoint is disabled; the command does not use it
    hosts = {"grpc": settings.grpc.host, "admin": settings.admin.host}
    addresses = {kind: endpoint(hosts[kind], port) for kind, port in ports.items()}
    target = AgentTarget(addresses.get("grpc"), addresses.get("admin"), f"port from {shown(settings.ports_path)}",
                         settings.name, holder)
    return _with_security(target, config, need)


def _with_security(target: AgentTarget, config: AgentConfig, need: Endpoint) -> AgentTarget:
    """The configuration to check ``target`` against, with the token variable and the (self-signed)
    certificate a client of endpoint ``need`` needs according to it."""
    security = config.agent.security if need == "grpc" else config.agent.admin.security
    tls = str(security.tls.cert_file) if security.tls is not None else None
    return replace(target, config=config, token_env=security.token_env, tls_ca=tls)


def expected_ids(config: AgentConfig, names: Iterable[str] | None = None) -> dict[str, str]:
    """Channel name -> id (a UUID string) of the channels of ``config`` (only ``names`` when
    given) whose ``channel.id`` exists: the channels the configuration's agent has opened."""
    wanted = list(config.channels) if names is None else [n for n in names if n in config.channels]
    known = {name: read_channel_id(config.channels[name].checkpoint_dir)[0] for name in wanted}
    return {name: channel_id for name, channel_id in known.items() if channel_id is not None}


def check_identity(target: AgentTarget, served: Callable[[str], str | None],
                   names: Iterable[str] | None = None) -> None:
    """Raise WrongAgentError unless the agent serves each channel of ``target.config`` (only
    ``names`` when given) with the id ``channel.id`` records. ``served(name)``: the id the agent
    reports for channel ``name`` (hex or UUID form), None when it has no such channel."""
    if target.config is None:
        return
    for name, expected in expected_ids(target.config, names).items():
        got = served(name)
        if got is not None and same_id(got, expected):
            continue
        conf = shown(target.config.path)
        differs = mismatch(name, expected, got, f"[channels.{name}] there", target.config.channels[name].checkpoint_dir)
        fix = _identity_fix(target, conf)
        raise WrongAgentError(f"{target.describe()} is not the agent of {conf}: {differs}; {fix}",
                              channel=name, expected=expected, served=got)


def mismatch(name: str, expected: str, served: str | None, origin: str, checkpoint_dir: str) -> str:
    """``it serves channel 'events' as <id>, but <origin> is channel <id> (<checkpoint_dir>/channel.id)``."""
    has = f"serves channel {name!r} as {_as_uuid(served)}" if served is not None else f"serves no channel {name!r}"
    return f"it {has}, but {origin} is channel {expected} ({shown(checkpoint_dir)}/channel.id)"


def _identity_fix(target: AgentTarget, conf: str) -> str:
    if target.flag is None:
        return f"its ports file names another agent: restart the agent of {conf}; nothing was sent or taken"
    return (f"nothing was sent or taken: leave out {target.flag} to use the agent of {conf}, or give --conf naming "
            "the configuration of the agent you mean")


def grpc_channel_ids(client: AgentClient) -> Callable[[str], str | None]:
    """``served`` for :func:`check_identity` over gRPC: the channel id in each channel's status."""
    from ..rpc.errors import UnknownChannelError

    def served(name: str) -> str | None:
        try:
            return str(client.status(name)["channel_id"])
        except UnknownChannelError:
            return None

    return served


def same_id(a: str, b: str) -> bool:
    return _as_uuid(a) == _as_uuid(b)


def _as_uuid(value: str | None) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        return str(value)


def token_from_env(variable: str | None, option: str) -> str | None:
    """The bearer token in environment variable ``variable`` (None: no token); unset or empty is a
    ConfigError naming ``option``, the setting that named the variable."""
    if variable is None:
        return None
    token = os.environ.get(variable, "")
    if not token:
        raise ConfigError(f"{option} names the environment variable {variable}, which is unset or empty: set it "
                          "to the agent's bearer token", key=option)
    return token
