"""What every task of the provider starts from: the channel, its settings and the agent to use.

Read when the task runs, in the worker, never when the DAG file is parsed: a DAG file names only
the channel, an optional configuration directory (default ``INGEST_CONF_DIR``, else ``conf``) and
an optional ``ingest_agent`` connection (:mod:`.hooks`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..orchestrate.remote import AgentAccess, StateSource, state_source
from ..orchestrate.settings import (
    ChannelSpec,
    OrchestrationSettings,
    channel_spec,
    conf_dir,
    load_orchestration_settings,
)

if TYPE_CHECKING:
    from ..land.config import LandingConfig

__all__ = ["ChannelTask", "plain"]


@dataclass(frozen=True)
class ChannelTask:
    """The settings a task of channel ``spec.name`` runs with."""

    settings: OrchestrationSettings
    spec: ChannelSpec
    landing: LandingConfig
    token: str | None  # the agent's bearer token from the connection (None: the configuration's)

    @classmethod
    def load(cls, channel: str, directory: str | None = None, agent_conn_id: str | None = None,
             table_format: str | None = None) -> ChannelTask:
        """Settings of ``directory`` (default :func:`conf_dir`); with ``agent_conn_id`` the landing
        takes through the connection's agent with its token and TLS files; ``table_format``
        overrides ``[landing] format``."""
        from ..land.config import load_landing_config

        settings = load_orchestration_settings(directory=Path(directory) if directory else conf_dir())
        overrides: dict[str, str] = {}
        token = None
        if agent_conn_id:
            from .hooks import IngestAgentHook

            hook = IngestAgentHook(agent_conn_id)
            overrides, token = hook.landing_overrides(), hook.token()
        if table_format:
            overrides["format"] = table_format
        landing = load_landing_config(settings.landing_conf, **overrides)
        return cls(settings, channel_spec(settings.agent_conf, channel, agent=landing.agent), landing, token)

    def source(self) -> StateSource:
        """Where the channel's state is read: its directories, or the status of the agent the
        landing takes through (:func:`~ingest_toolkit.orchestrate.remote.state_source`)."""
        return state_source(self.spec, self.access(), self.settings.observe)

    def access(self) -> AgentAccess | None:
        """The agent of the landing configuration (the connection's, when given), with its token."""
        return AgentAccess.of(self.landing, self.token)


def plain(values: Any) -> Any:
    """``values`` as JSON types (XCom, asset event extras): the verdicts' str subclasses become str."""
    return json.loads(json.dumps(values, default=str))
