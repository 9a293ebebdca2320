"""What Airflow's providers manager reads (the ``apache_airflow_provider`` entry point): the
``ingest_agent`` connection type, its hook and its form, declared here as Airflow 3.2+ wants them
(``hook-name``, ``conn-fields``, ``ui-field-behaviour`` of the connection type), so the UI builds
the form without importing the hook.

The form: Host and Port are the agent's gRPC address (``[agent.grpc]`` of its configuration,
127.0.0.1:7431 in the shipped ``conf/agent.toml``), Password its bearer token; Login and Schema
mean nothing to an agent and are hidden. The extra fields are :data:`CONN_FIELDS`, the keys the
hook reads from the connection's extra (:mod:`.hooks`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["AGENT_GRPC_PORT", "CONN_FIELDS", "UI_FIELD_BEHAVIOUR", "get_provider_info"]

AGENT_GRPC_PORT = 7431  # [agent.grpc] port of the shipped conf/agent.toml

CONN_FIELDS: dict[str, dict[str, Any]] = {
    "channel": {"label": "Channel", "description": "The channel Test asks the agent about (default: events).",
                "schema": {"type": ["string", "null"], "default": "events"}},
    "token_env": {"label": "Token variable",
                  "description": "An environment variable holding the bearer token, read where the task runs "
                                 "(instead of Password), e.g. INGEST_AGENT_TOKEN.",
                  "schema": {"type": ["string", "null"]}},
    "tls_ca": {"label": "TLS CA file",
               "description": "PEM file that turns TLS on and verifies the agent, e.g. /etc/ingest/ca.pem.",
               "schema": {"type": ["string", "null"]}},
    "tls_cert": {"label": "TLS client certificate", "description": "PEM client certificate, for mutual TLS.",
                 "schema": {"type": ["string", "null"]}},
    "tls_key": {"label": "TLS client key", "description": "PEM key of the client certificate, for mutual TLS.",
                "schema": {"type": ["string", "null"]}},
}

UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema", "login"],
    "relabeling": {"host": "Agent host", "port": "Agent gRPC port", "password": "Bearer token"},
    "placeholders": {"host": "127.0.0.1", "port": str(AGENT_GRPC_PORT),
                     "password": "the agent's token ([agent.security] token_env on the agent)"},
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "ingest-toolkit",
        "name": "Ingest Toolkit",
        "description": "Landing, curation and checks of ingest-toolkit file channels (ingest_toolkit.airflow).",
        "connection-types": [{"connection-type": "ingest_agent", "hook-name": "Ingest Toolkit agent",
                              "hook-class-name": "ingest_toolkit.airflow.hooks.IngestAgentHook",
                              "conn-fields": CONN_FIELDS, "ui-field-behaviour": UI_FIELD_BEHAVIOUR}],
    }
