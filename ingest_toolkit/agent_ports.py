"""The endpoints of the agent that owns a channel, from the ports file it writes.

A running agent writes ``[agent] ports_file`` (``<state_dir>/ports.json``): its pid and the ports
it bound (``grpc``, ``admin``, per source). A client that finds a channel's lock held uses an
endpoint from that file only if the record holds up:

* it names the very process that holds the channel's lock (the kernel's lock table says who that
  is, not a file);
* the file belongs to the current user or to that process's user and is writable by no one else
  (so another local user cannot plant it);
* only the *port* comes from the file: the host is the configuration's (127.0.0.1 for a wildcard
  address).

The landing (``land/route.py``) takes through the gRPC port; ``channel acknowledge`` posts to the
admin port. Core only: no Spark, no Dagster.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from .errors import ConfigError

__all__ = ["endpoint", "owner_port", "shown"]

_WILDCARD = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "::1"}
Endpoint = Literal["grpc", "admin"]


def owner_port(path: Path, owner: int, owned: str, kind: Endpoint, fix: str) -> int:
    """Port ``kind`` of the ports file ``path`` of the agent with pid ``owner``, after the trust
    checks of the module docstring. ``owned`` starts each error ("channel 'events' (...) is owned
    by process 123"), ``fix`` ends it (what the user can give instead)."""
    try:
        st = os.stat(path)
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{owned}, but the agent's ports file {path} does not exist: {fix}",
                          key="agent.ports_file") from None
    except (OSError, ValueError) as err:
        raise ConfigError(f"{owned}, but its ports file {path} is unreadable ({err}): {fix}",
                          key="agent.ports_file") from None
    problem = _untrusted(st, owner) or _record_problem(record, owner, kind)
    if problem:
        raise ConfigError(f"{owned}, but its ports file {path} {problem}: {fix}", key="agent.ports_file")
    return int(record[kind])


def endpoint(host: str, port: int) -> str:
    """``host:port`` to connect to: a wildcard bind address means the local host."""
    host = _WILDCARD.get(host, host)
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def shown(path: str | os.PathLike[str]) -> str:
    """``path`` for a message, as the user would type it: relative to the current directory when
    it is inside it (``var/agent/ports.json``), else as it is."""
    relative = os.path.relpath(path)
    return relative if not relative.startswith("..") else str(path)


def _untrusted(st: os.stat_result, owner: int) -> str | None:
    if st.st_mode & 0o022:
        return "is writable by other users (chmod go-w it)"
    users = {os.getuid(), _uid_of(owner)}
    if st.st_uid not in users:
        return f"belongs to uid {st.st_uid}, neither this user nor the agent's"
    return None


def _record_problem(record: Any, owner: int, kind: Endpoint) -> str | None:
    if not isinstance(record, dict):
        return "is not an agent's ports file"
    if record.get("pid") != owner:
        return f"names pid {record.get('pid')}, not {owner} (a stale file, or another agent)"
    if not isinstance(record.get(kind), int):
        return {"grpc": "has no gRPC port (the agent's [agent.grpc] endpoint is disabled)",
                "admin": "has no admin port (the agent's [agent.admin] endpoint is disabled)"}[kind]
    return None


def _uid_of(pid: int) -> int:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return os.getuid()
