"""The agent a landing takes through, from an Airflow connection: address, bearer token, TLS files.

A connection of type ``ingest_agent``: host and port are the agent's gRPC endpoint, the password
is its bearer token, and the extra holds the rest (the fields of the connection form,
:data:`~.provider.CONN_FIELDS`): ``token_env``, a variable holding the token where the task runs
(instead of the password); ``tls_ca``, the PEM that turns TLS on; ``tls_cert`` + ``tls_key``, a
client certificate for mutual TLS; ``channel``, the channel the connection test asks about. It
lives where Airflow keeps secrets (its database, a secrets backend, ``AIRFLOW_CONN_<ID>``), never
in DAG code::

    airflow connections add ingest_agent --conn-type ingest_agent --conn-host 127.0.0.1 \\
        --conn-port 7431 --conn-password "$TOKEN" --conn-extra '{"tls_ca": "/etc/ingest/ca.pem"}'

The values become the ``[landing]`` keys ``agent``, ``agent_token_env``, ``agent_tls_ca``,
``agent_tls_cert`` and ``agent_tls_key`` of the task's landing configuration
(:meth:`IngestAgentHook.landing_overrides`), so the landing and the checks connect exactly as
``ingest-toolkit land --agent`` does. :meth:`IngestAgentHook.test_connection` is the form's Test
button (and ``POST /api/v2/connections/test``): one status call to the agent.
"""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import BaseHook

from ..errors import ConfigError, IngestError
from .provider import AGENT_GRPC_PORT

__all__ = ["IngestAgentHook"]

_LANDING_KEYS = {"token_env": "agent_token_env", "tls_ca": "agent_tls_ca", "tls_cert": "agent_tls_cert",
                 "tls_key": "agent_tls_key"}
_EXTRA_KEYS = {*_LANDING_KEYS, "channel"}
_TEST_TIMEOUT = 10.0  # seconds: the Test button waits at most this long for the agent


class IngestAgentHook(BaseHook):
    """Reads an ``ingest_agent`` connection (module docstring). The connection form is declared in
    :func:`~.provider.get_provider_info` (Airflow 3.2+ builds it from there, not from the hook)."""

    conn_name_attr = "ingest_agent_conn_id"
    default_conn_name = "ingest_agent_default"
    conn_type = "ingest_agent"
    hook_name = "Ingest Toolkit agent"

    def __init__(self, ingest_agent_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.ingest_agent_conn_id = ingest_agent_conn_id

    def landing_overrides(self) -> dict[str, str]:
        """``[landing]`` values from the connection: ``agent`` (host:port), the token variable and
        the TLS files."""
        conn = self.get_connection(self.ingest_agent_conn_id)
        where = f"Airflow connection {self.ingest_agent_conn_id!r}"
        if not conn.host or not conn.port:
            raise ConfigError(f"{where} has no host or port: set them to the agent's gRPC address (host 127.0.0.1, "
                              f"port {AGENT_GRPC_PORT} for the shipped conf/agent.toml)", key="agent")
        extra = self._extra(conn.extra_dejson, where)
        host = f"[{conn.host}]" if ":" in conn.host else conn.host
        return {"agent": f"{host}:{conn.port}",
                **{_LANDING_KEYS[k]: str(v) for k, v in extra.items() if v and k in _LANDING_KEYS}}

    def token(self) -> str | None:
        """The agent's bearer token: the connection's password, else the variable its ``token_env``
        names (read now, where the task runs); None when it has neither."""
        conn = self.get_connection(self.ingest_agent_conn_id)
        if conn.password:
            return str(conn.password)
        variable = conn.extra_dejson.get("token_env") or conn.extra_dejson.get("extra__ingest_agent__token_env")
        return (os.environ.get(str(variable)) or None) if variable else None

    def test_connection(self) -> tuple[bool, str]:
        """One status call to the agent, as a landing makes it: ``(True, what the agent serves)`` or
        ``(False, one line saying why not)``. Airflow's Test button shows the text."""
        try:
            overrides = self.landing_overrides()
            token = self.token()
            channel = self._channel()
        except IngestError as err:
            return False, _one_line(err)
        address = overrides["agent"]
        if token is None and "agent_token_env" in overrides:
            return False, f"the token variable {overrides['agent_token_env']} is not set where this test runs"
        try:
            status = _status(address, token, overrides, channel)
        except IngestError as err:
            return False, _refused(address, channel, err)
        tls = any(key in overrides for key in ("agent_tls_ca", "agent_tls_cert"))  # either turns TLS on
        return True, _served(address, channel, status, token is not None, tls)

    def _channel(self) -> str:
        extra = self.get_connection(self.ingest_agent_conn_id).extra_dejson
        return str(extra.get("channel") or extra.get("extra__ingest_agent__channel") or "events")

    @staticmethod
    def _extra(values: dict[str, Any], where: str) -> dict[str, Any]:
        """The extra's keys without the prefix the form may give them (``extra__ingest_agent__``);
        an unknown key is a ConfigError naming the connection."""
        extra = {key.removeprefix("extra__ingest_agent__"): value for key, value in values.items()}
        unknown = sorted(set(extra) - _EXTRA_KEYS)
        if unknown:
            raise ConfigError(f"{where}: unknown extra keys {unknown}; the extra holds only "
                              f"{sorted(_EXTRA_KEYS)}", key="agent")
        return extra


def _status(address: str, token: str | None, overrides: dict[str, str], channel: str) -> dict[str, Any]:
    from ..rpc.client import AgentClient

    names = {"ca": "tls_ca", "cert": "tls_cert", "key": "tls_key"}
    with AgentClient(address, token=token, tls_ca=overrides.get("agent_tls_ca"),
                     tls_cert=overrides.get("agent_tls_cert"), tls_key=overrides.get("agent_tls_key"),
                     timeout=_TEST_TIMEOUT, tls_names=names) as client:
        return client.status(channel)


def _served(address: str, channel: str, status: dict[str, Any], token: bool, tls: bool) -> str:
    checkpoint = status.get("checkpoint") or {}
    age = checkpoint.get("age_seconds")
    written = f"checkpoint written {age:.0f} s ago" if isinstance(age, int | float) else "no checkpoint yet"
    return (f"agent {address} serves channel {channel} (id {str(status.get('channel_id', ''))[:12]}): "
            f"{status.get('queue_size', 0)} events queued, {written}; "
            f"{'TLS' if tls else 'plaintext'}, {'token accepted' if token else 'no token'}")


def _refused(address: str, channel: str, err: IngestError) -> str:
    """Why the status call failed, and what to change in the form."""
    from ..rpc.errors import AgentUnavailableError, AuthenticationError, UnknownChannelError

    if isinstance(err, AgentUnavailableError):
        cause = _one_line(err).split("last error: ")[-1].split("; retry later")[0].rstrip(")")
        return (f"no agent answers at {address} ({cause}): check Host and Port (the agent's [agent.grpc] host and "
                "port) and that the agent runs")
    if isinstance(err, AuthenticationError):
        return f"agent {address} refused the token: set Bearer token (or Token variable) to the agent's token"
    if isinstance(err, UnknownChannelError):
        return (f"agent {address} has no channel {channel!r} (it hosts {', '.join(sorted(err.known)) or 'none'}): "
                "set Channel in the connection")
    return f"agent {address}: {_one_line(err)}"


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())
