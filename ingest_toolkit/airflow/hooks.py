"""The agent a landing takes through, from an Airflow connection: address, bearer token, TLS files.

A connection of type ``ingest_agent``: host and port are the agent's gRPC endpoint, the password
is its bearer token, and the extra holds the TLS files (``tls_ca``: the PEM that turns TLS on;
``tls_cert`` + ``tls_key``: a client certificate for mutual TLS). It lives where Airflow keeps
secrets (its database, a secrets backend, ``AIRFLOW_CONN_<ID>``), never in DAG code::

    airflow connections add ingest_agent --conn-type ingest_agent --conn-host 127.0.0.1 \\
        --conn-port 7433 --conn-password "$TOKEN" --conn-extra '{"tls_ca": "/etc/ingest/ca.pem"}'

The values become the ``[landing]`` keys ``agent``, ``agent_tls_ca``, ``agent_tls_cert`` and
``agent_tls_key`` of the task's landing configuration (:meth:`IngestAgentHook.landing_overrides`),
so the landing and the checks connect exactly as ``ingest-toolkit land --agent`` does.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from ..errors import ConfigError

__all__ = ["IngestAgentHook"]

_TLS_KEYS = {"tls_ca": "agent_tls_ca", "tls_cert": "agent_tls_cert", "tls_key": "agent_tls_key"}


class IngestAgentHook(BaseHook):
    """Reads an ``ingest_agent`` connection (module docstring)."""

    conn_name_attr = "ingest_agent_conn_id"
    default_conn_name = "ingest_agent_default"
    conn_type = "ingest_agent"
    hook_name = "Ingest Toolkit agent"

    def __init__(self, ingest_agent_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.ingest_agent_conn_id = ingest_agent_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {"hidden_fields": ["schema", "login"],
                "relabeling": {"host": "Agent host", "port": "Agent gRPC port", "password": "Bearer token"},
                "placeholders": {"host": "127.0.0.1", "port": "7433",
                                 "extra": '{"tls_ca": "/path/ca.pem", "tls_cert": "...", "tls_key": "..."}'}}

    def landing_overrides(self) -> dict[str, str]:
        """``[landing]`` values from the connection: ``agent`` (host:port) and the TLS files."""
        conn = self.get_connection(self.ingest_agent_conn_id)
        where = f"Airflow connection {self.ingest_agent_conn_id!r}"
        if not conn.host or not conn.port:
            raise ConfigError(f"{where} has no host or port: set them to the agent's gRPC address (host 127.0.0.1, "
                              "port 7433 for the shipped conf/agent.toml)", key="agent")
        extra = conn.extra_dejson
        unknown = sorted(set(extra) - set(_TLS_KEYS))
        if unknown:
            raise ConfigError(f"{where}: unknown extra keys {unknown}; the extra holds only "
                              f"{sorted(_TLS_KEYS)}", key="agent")
        host = f"[{conn.host}]" if ":" in conn.host else conn.host
        return {"agent": f"{host}:{conn.port}", **{_TLS_KEYS[k]: str(v) for k, v in extra.items() if v}}

    def token(self) -> str | None:
        """The agent's bearer token (the connection's password), None when it has none."""
        return self.get_connection(self.ingest_agent_conn_id).password or None
