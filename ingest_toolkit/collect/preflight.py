"""Before the agent opens anything: everything its start would trip over, found at once.

``agent --check`` and :meth:`~.agent.Agent.start` run the same :func:`preflight_problems`, so the
check finds what the start would find, and the start fails before it opened a channel, locked a
directory or bound a port. Each problem names its setting:

* **directories** (:func:`directory_problems`): every directory the agent writes is tried the way
  it will be written: a file is created (and removed) in it, or, for one that does not exist yet,
  in the nearest existing parent. Read-only file systems, immutable directories, permissions and a
  path through a regular file all show up. (A read-only directory used to surface as a raw
  ``OSError`` halfway through the start, after ``--check`` said "configuration OK".)
* **security** (:func:`security_problems`): every ``token_env`` (the gRPC and admin endpoints,
  HTTP sources, forward sinks) is set and not empty; every TLS file is read and checked (a server
  certificate with its key, a sink's CA, client certificate and key); every channel's encryption
  keys are read.
* **ports** (:func:`port_problems`): every endpoint with a fixed port (gRPC, admin, HTTP sources)
  can bind it now, on its host, and no two share one. (A topology whose tokens and files were
  missing used to pass ``--check`` and fail after its channel was opened.)
* **sources** (:func:`source_problems`): an exec source's program is found (on the ``PATH`` the
  command will have) and its ``cwd`` is a directory.

What no check before the start can know stays the start's: a port taken between the check and
the bind, a downstream agent that is down (a forward sink backs off and retries; it is not a
start failure).
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import tempfile
from pathlib import Path

from ..channel.crypto import keychain_of
from ..errors import ConfigError
from ..security import SecuritySettings, TlsSettings, load_client_tls, server_ssl_context
from .config import AgentConfig
from .sinks.settings import ForwardSinkSettings
from .sources.exec import ExecSettings
from .sources.http import HttpSettings
from .sources.spool_settings import SpoolDirSettings

__all__ = ["bind_problem", "directory_problems", "port_problems", "preflight_problems", "security_problems",
           "source_problems", "writable_problem"]

Problems = list[tuple[str, str]]


def preflight_problems(config: AgentConfig) -> Problems:
    """``(setting, problem)`` for everything that would make the start of ``config`` fail."""
    return [*directory_problems(config), *security_problems(config), *port_problems(config),
            *source_problems(config)]


def directory_problems(config: AgentConfig) -> list[tuple[str, str]]:
    """``(setting, problem)`` for every directory of ``config`` the agent cannot write."""
    targets: list[tuple[str, Path]] = [("agent.state_dir", config.agent.state_dir),
                                       ("agent.ports_file", config.agent.ports_path.parent)]
    for name, channel in config.channels.items():
        targets.append((f"channels.{name}.checkpoint_dir", Path(channel.checkpoint_dir)))
        targets += [(f"channels.{name}.data_dirs", Path(d)) for d in channel.data_dirs]
        if channel.backup_checkpoint_dir:
            targets.append((f"channels.{name}.backup_checkpoint_dir", Path(channel.backup_checkpoint_dir)))
    for name, source in config.sources.items():
        if isinstance(source, SpoolDirSettings):  # completed files are renamed or deleted there
            targets.append((f"sources.{name}.dir", source.dir))
    problems, seen = [], set()
    for key, directory in targets:
        if os.path.realpath(directory) in seen:
            continue  # the ports file beside the state, say: one problem per directory
        seen.add(os.path.realpath(directory))
        problem = writable_problem(directory)
        if problem is not None:
            problems.append((key, f"{problem}; make it writable for the agent's user, or set {key} to a "
                                  "directory it can write"))
    return problems


def writable_problem(directory: Path) -> str | None:
    """Why the agent could not create files in ``directory`` (creating it first if needed), or
    None. Nothing is left behind: a probe file is created and removed at once."""
    existing = directory
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        return f"{directory} cannot be created: {existing} is not a directory"
    try:
        fd, probe = tempfile.mkstemp(prefix=".ingest-write-check-", dir=existing)
    except OSError as err:
        what = f"{directory}" if existing == directory else f"{directory} does not exist and its parent {existing}"
        return f"{what} is not writable ({err.strerror or err})"
    os.close(fd)
    os.unlink(probe)
    return None


# -- security -----------------------------------------------------------------------------------
def _server_security(config: AgentConfig) -> list[tuple[str, SecuritySettings]]:
    agent = config.agent
    found = [("agent.security", agent.security), ("agent.admin.security", agent.admin.security)]
    return found + [(f"sources.{name}.security", security) for name, settings in config.sources.items()
                    if isinstance(security := getattr(settings, "security", None), SecuritySettings)]


def security_problems(config: AgentConfig) -> Problems:
    """Unset token variables, unreadable or mismatched TLS files, unreadable channel keys."""
    problems: Problems = []
    for key, security in _server_security(config):
        problems += _token_problem(security.token_env, f"{key}.token_env")
        if security.tls is not None:
            problems += _server_tls_problem(security.tls, f"{key}.tls")
    for name, sink in config.sinks.items():
        problems += _token_problem(sink.token_env, f"sinks.{name}.token_env")
        problems += _client_tls_problem(name, sink)
    for name, channel in config.channels.items():
        if channel.encryption_key_file or channel.encryption_key_env:
            try:
                keychain_of(channel)
            except ConfigError as err:
                problems.append((f"channels.{name}.{(err.key or '').removeprefix('channel.')}", str(err)))
    return problems


def _token_problem(variable: str | None, key: str) -> Problems:
    if variable is None or os.environ.get(variable):
        return []
    return [(key, f"the environment variable {variable} (a bearer token) is unset or empty: set it in the "
                  f"agent's environment, or remove {key}")]


def _server_tls_problem(tls: TlsSettings, key: str) -> Problems:
    try:
        tls.read()
        server_ssl_context(tls)  # the certificate, its key and the client CA load together
    except ConfigError as err:
        return [(key, str(err).removeprefix("security.tls."))]
    return []


def _client_tls_problem(name: str, sink: ForwardSinkSettings) -> Problems:
    names = {"ca": f"sinks.{name}.tls_ca", "cert": f"sinks.{name}.tls_cert", "key": f"sinks.{name}.tls_key"}
    try:
        load_client_tls(sink.tls_ca, sink.tls_cert, sink.tls_key, names=names)
    except ConfigError as err:
        return [(err.key or names["ca"], str(err))]
    return []


# -- ports --------------------------------------------------------------------------------------
def _listeners(config: AgentConfig) -> list[tuple[str, str, int]]:
    """``(setting, host, port)`` of every endpoint with a fixed port (0 picks a free one)."""
    agent = config.agent
    found = [("agent.grpc.port", agent.grpc.host, agent.grpc.port)] if agent.grpc.enabled else []
    found += [("agent.admin.port", agent.admin.host, agent.admin.port)] if agent.admin.enabled else []
    found += [(f"sources.{name}.port", s.host, s.port) for name, s in config.sources.items()
              if isinstance(s, HttpSettings)]
    return [(key, host, port) for key, host, port in found if port]


def port_problems(config: AgentConfig) -> Problems:
    """Fixed ports that another endpoint of this configuration or another process already holds."""
    problems: Problems = []
    owners: dict[int, str] = {}
    for key, host, port in _listeners(config):
        if port in owners:
            problems.append((key, f"port {port} is also {owners[port]}: give every endpoint a port of its own"))
            continue
        owners[port] = key
        problem = bind_problem(host, port)
        if problem is not None:
            problems.append((key, f"{problem}: stop what listens there, or set {key} to a free port"))
    return problems


def bind_problem(host: str, port: int) -> str | None:
    """Why a listener could not bind ``host:port`` now (None: it could). The probe binds as the
    agent's servers do (``SO_REUSEADDR``: a port in TIME_WAIT is free) and closes at once."""
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                                  flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as err:
        return f"the host {host!r} does not resolve ({err.strerror})"
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return f"{host}:{port} is already in use by another process"
            return f"{host}:{port} cannot be bound ({err.strerror or err})"
    return None


# -- sources ------------------------------------------------------------------------------------
def source_problems(config: AgentConfig) -> Problems:
    """An exec source's program that cannot be found, its working directory missing."""
    problems: Problems = []
    for name, settings in config.sources.items():
        if isinstance(settings, ExecSettings):
            problems += _exec_problems(f"sources.{name}", settings)
    return problems


def _exec_problems(key: str, settings: ExecSettings) -> Problems:
    if settings.cwd is not None and not settings.cwd.is_dir():
        return [(f"{key}.cwd", f"{settings.cwd} is not a directory: create it, or fix {key}.cwd")]
    program = settings.argv()[0]
    path = settings.env.get("PATH", os.environ.get("PATH", os.defpath))
    where = settings.cwd or Path.cwd()
    found = (os.access(where / program, os.X_OK) and (where / program).is_file()) if "/" in program else \
        shutil.which(program, path=path) is not None
    if found:
        return []
    return [(f"{key}.command", f"the program {program!r} is not found or not executable"
                               f"{'' if '/' in program else ' on the PATH'}: install it, or fix {key}.command")]
