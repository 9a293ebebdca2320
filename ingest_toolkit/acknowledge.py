"""``channel acknowledge``: an operator marks a channel's incidents as handled.

Incidents (:mod:`ingest_toolkit.channel.incidents`) live in the channel's checkpoint directory,
which belongs to the process that holds the channel's lock. So:

* no process holds the lock: the command takes it and writes ``incidents.json`` itself;
* an agent holds it: the command asks that agent (``POST /channels/<name>/incidents/acknowledge``
  on its admin endpoint, the port from its ports file as :mod:`ingest_toolkit.agent_ports`
  trusts it, the host, token and TLS from the agent configuration), which writes the file;
* anything else holds it (or the channel was given by its directories only): an error naming
  the owner and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .agent_ports import endpoint, owner_port
from .channel.incidents import acknowledge_incidents
from .channel.lock import DirectoryLock, lock_holder
from .channel_conf import NamedChannel
from .errors import ChannelError, ConfigError

__all__ = ["Acknowledged", "acknowledge"]

_TIMEOUT = 10.0


@dataclass(frozen=True)
class Acknowledged:
    incidents: list[dict[str, Any]]  # as Incident.to_json()
    via: str  # "the channel's directory" or "agent 'edge-1' (pid 123) at https://127.0.0.1:7432"


def acknowledge(checkpoint_dir: str, named: NamedChannel | None, ids: list[int] | None, note: str) -> Acknowledged:
    """Acknowledge open incidents (``ids`` None: all) of the channel whose checkpoint directory is
    ``checkpoint_dir``; ``named``: how the user named it (None: by its directories)."""
    owner = lock_holder(checkpoint_dir)
    if owner is None:
        lock = DirectoryLock(checkpoint_dir)
        lock.acquire()  # a process that started meanwhile: ChannelLockedError, nothing written
        try:
            marked = acknowledge_incidents(checkpoint_dir, ids, note)
        finally:
            lock.release()
        return Acknowledged([i.to_json() for i in marked], "the channel's directory (no process holds it)")
    return _through_agent(checkpoint_dir, named, owner, ids, note)


def _through_agent(checkpoint_dir: str, named: NamedChannel | None, owner: int, ids: list[int] | None,
                   note: str) -> Acknowledged:
    owned = f"the channel in {checkpoint_dir} is owned by process {owner}"
    fix = "stop that process, or run the command with --conf naming the agent configuration that describes it"
    if named is None or named.agent_conf is None or named.name is None:
        raise ConfigError(f"{owned}, and only an agent can change a channel it owns: {fix}", key="conf")
    from .collect.config import load_agent_config

    agent = load_agent_config(named.agent_conf)
    admin = agent.agent.admin
    port = owner_port(agent.agent.ports_path, owner, owned, "admin", fix)
    address, path = endpoint(admin.host, port), f"/channels/{named.name}/incidents/acknowledge"
    answer = _post(address, path, {"ids": ids, "note": note}, admin.security, owned)
    scheme = "https" if admin.security.tls is not None else "http"
    return Acknowledged(answer.get("acknowledged", []),
                        f"agent {agent.agent.name!r} (pid {owner}) at {scheme}://{address}{path}")


def _post(address: str, path: str, body: dict[str, Any], security: Any, owned: str) -> dict[str, Any]:
    from .collect.admin_client import AdminClient
    from .collect.errors import AdminRequestError
    from .security import load_token

    token = load_token(security, key="agent.admin.security.token_env")
    tls_ca = str(security.tls.cert_file) if security.tls is not None else None  # a self-signed agent's own
    client = AdminClient(address, token=token, tls_ca=tls_ca, timeout=_TIMEOUT)
    url = client.base + path
    try:
        return client.post(path, body)
    except AdminRequestError as err:
        if err.status is not None:
            raise ChannelError(f"{owned}; its agent refused the acknowledgement at {url}: HTTP {err.status}, "
                               f"{err.text}") from None
        raise ChannelError(f"{owned}; its agent could not be asked at {url} ({err.text}): check that it runs and "
                           "that [agent.admin] is enabled") from None
