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

import json
import ssl
import urllib.error
import urllib.request
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
    scheme = "https" if admin.security.tls is not None else "http"
    url = f"{scheme}://{endpoint(admin.host, port)}/channels/{named.name}/incidents/acknowledge"
    answer = _post(url, {"ids": ids, "note": note}, agent.agent.admin.security, owned)
    return Acknowledged(answer.get("acknowledged", []), f"agent {agent.agent.name!r} (pid {owner}) at {url}")


def _post(url: str, body: dict[str, Any], security: Any, owned: str) -> dict[str, Any]:
    from .security import load_token

    headers = {"Content-Type": "application/json"}
    token = load_token(security, key="agent.admin.security.token_env")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    context = None
    if security.tls is not None:  # the agent's own certificate is the trusted one (a self-signed setup)
        context = ssl.create_default_context(cafile=str(security.tls.cert_file))
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT, context=context) as response:  # noqa: S310 (our URL)
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as err:
        raise ChannelError(f"{owned}; its agent refused the acknowledgement at {url}: HTTP {err.code}, "
                           f"{_error_text(err)}") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise ChannelError(f"{owned}; its agent could not be asked at {url} ({err}): check that it runs and that "
                           "[agent.admin] is enabled") from None


def _error_text(err: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(err.read()).get("error", err.reason))
    except (ValueError, OSError, AttributeError):
        return str(err.reason)
