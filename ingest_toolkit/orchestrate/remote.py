"""Where the orchestration reads a channel's state: its directories, or its agent's status API.

The sensor's decision, the drain schedule, the observer and every channel check judge what
``checkpoint.meta`` and the segment files say. On the agent's host they read the files (no lock,
no RPC). Anywhere else the agent's gRPC ``Status`` serves the same: every field of
``checkpoint.meta`` and the segment health the checks judge (reference recount, drained logs,
missing or cut segments: :func:`~ingest_toolkit.channel.tools.health.channel_health`), so Dagster
or Airflow needs no shared disk.

:func:`state_source` picks one per channel: a :class:`LocalState` or an :class:`AgentState`.

* ``observe = "local"``: the directories, always;
* ``observe = "remote"``: the agent's status (an agent must be configured);
* ``observe = "auto"`` (the default): the agent's status when an agent is configured (the
  ``[landing] agent`` the runs take through, a component's ``agent``, an Airflow connection)
  and the channel's checkpoint directory cannot be read here; else the directories.

The agent is reached as the landing reaches it (:class:`AgentAccess`: address, bearer token,
TLS and mutual TLS files of ``[landing]``). An agent that does not answer is an
:class:`AgentUnreachable` (an :class:`~ingest_toolkit.errors.IngestError`) naming the address and
the cause; the checks turn it into a failed verdict, the sensor into a skip. Every verdict and
decision says where its state came from (``state_from``).

Ages are the agent's: a remote state is judged at the agent's clock (its ``age_seconds`` of the
checkpoint), so a clock that differs between the hosts does not age a checkpoint.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..channel.checkpoint import CheckpointInfo, read_checkpoint_meta
from ..errors import CheckpointInvalid, ConfigError, IngestError

if TYPE_CHECKING:
    from ..land.config import LandingConfig
    from .settings import ChannelSpec

__all__ = ["AgentAccess", "AgentState", "AgentUnreachable", "LocalState", "ObserveMode", "StateSource",
           "info_from_status", "state_source"]

ObserveMode = Literal["auto", "local", "remote"]
STATUS_TIMEOUT = 10.0


class AgentUnreachable(IngestError):
    """The agent serving a channel's state did not answer its status call."""


@dataclass(frozen=True, slots=True)
class AgentAccess:
    """How to reach an agent's gRPC API: the ``[landing]`` agent keys, and a token given by the
    orchestrator (a secret); without one the token is read from ``token_env`` (else
    ``INGEST_AGENT_TOKEN``) at each call."""

    address: str
    token: str | None = field(default=None, repr=False)
    token_env: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    timeout: float = STATUS_TIMEOUT

    @classmethod
    def of(cls, config: LandingConfig, token: str | None = None, agent: str | None = None) -> AgentAccess | None:
        """The agent of ``config`` (or ``agent``, overriding ``[landing] agent``); None when none is set."""
        address = agent or config.agent
        if not address:
            return None
        return cls(address, token, config.agent_token_env, config.agent_tls_ca, config.agent_tls_cert,
                   config.agent_tls_key)

    def bearer(self) -> str | None:
        return self.token if self.token is not None else os.environ.get(self.token_env or "INGEST_AGENT_TOKEN")

    def status(self, channel: str) -> dict[str, Any]:
        """The channel's status; :class:`AgentUnreachable` naming the address when it does not answer
        (refused, timed out, refused the token, TLS failed, no such channel)."""
        from ..rpc.client import AgentClient

        names = {"ca": "landing.agent_tls_ca", "cert": "landing.agent_tls_cert", "key": "landing.agent_tls_key"}
        try:
            with AgentClient(self.address, token=self.bearer(), tls_ca=self.tls_ca, tls_cert=self.tls_cert,
                             tls_key=self.tls_key, timeout=self.timeout, tls_names=names) as client:
                return client.status(channel)
        except IngestError as err:
            raise AgentUnreachable(f"agent {self.address} did not serve the status of channel {channel}: "
                                   f"{_one_line(err)}; check that the agent runs and listens there, and the "
                                   "token and TLS files of [landing] (agent_token_env, agent_tls_*)") from None


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


def info_from_status(status: dict[str, Any]) -> CheckpointInfo | None:
    """The :class:`CheckpointInfo` an agent's status carries (``checkpoint``), None without a checkpoint."""
    doc = status.get("checkpoint")
    if not doc:
        return None
    names = CheckpointInfo.__dataclass_fields__
    values = {k: v for k, v in doc.items() if k in names}
    values["log_refcounts"] = {int(k): int(v) for k, v in (values.get("log_refcounts") or {}).items()}
    values["log_position"] = tuple(values.get("log_position") or (0, 0))
    return CheckpointInfo(**values)


class LocalState:
    """The channel's state from its directories on this host."""

    remote = False

    def __init__(self, checkpoint_dir: str) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.where = f"checkpoint directory {checkpoint_dir}"

    def checkpoint(self) -> tuple[CheckpointInfo | None, int | None]:
        """``checkpoint.meta`` and the time to judge it at (None: now). Raises CheckpointInvalid, OSError."""
        return read_checkpoint_meta(self.checkpoint_dir), None


class AgentState:
    """The channel's state from its agent's status API (one call, kept for the object's life)."""

    remote = True

    def __init__(self, spec: ChannelSpec, access: AgentAccess) -> None:
        self.spec, self.access = spec, access
        self.where = f"agent {access.address} (gRPC status)"
        self._status: dict[str, Any] | None = None

    def status(self) -> dict[str, Any]:
        """The agent's status of the channel; AgentUnreachable when it does not answer."""
        if self._status is None:
            self._status = self.access.status(self.spec.name)
        return self._status

    def checkpoint(self) -> tuple[CheckpointInfo | None, int | None]:
        """``checkpoint.meta`` as the agent read it, and the agent's clock when it did."""
        status = self.status()
        if status.get("checkpoint_error"):
            raise CheckpointInvalid(f"checkpoint.meta on agent {self.access.address}", status["checkpoint_error"])
        info = info_from_status(status)
        if info is None:
            return None, None
        age = float(status["checkpoint"].get("age_seconds", info.age_seconds()))
        return info, info.written_unix_ns + int(age * 1e9)

    def now_ns(self) -> int:
        """The agent's clock at the status (for ages computed here); now when it has no checkpoint."""
        _info, now = self.checkpoint()
        return now or time.time_ns()


StateSource = LocalState | AgentState


def _readable(directory: str) -> bool:
    return os.path.isdir(directory) and os.access(directory, os.R_OK | os.X_OK)


def state_source(spec: ChannelSpec, access: AgentAccess | None, mode: ObserveMode = "auto") -> StateSource:
    """Where to read the state of ``spec`` (module docstring). ``observe = "remote"`` without an
    agent is a ConfigError naming the keys to set."""
    if mode == "local":
        return LocalState(spec.checkpoint_dir)
    if access is None:
        if mode == "remote":
            raise ConfigError(f"channel {spec.name}: observe = \"remote\" needs an agent to ask: set [landing] agent "
                              "(or the component's agent, or the task's agent connection)", key="observe")
        return LocalState(spec.checkpoint_dir)
    if mode == "remote" or not _readable(spec.checkpoint_dir):
        return AgentState(spec, access)
    return LocalState(spec.checkpoint_dir)
