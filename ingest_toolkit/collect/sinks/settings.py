"""Settings of sinks (``[sinks.<name>]``) and sink groups (``[sink_groups.<name>]``).

A sink empties a local channel into somewhere else; today's one type is ``forward``: a put to a
downstream agent's gRPC endpoint. Sinks run in groups (Flume's sink processors): a group takes
batches from its channel and hands each to one of its sinks, ``failover`` (by priority, a failing
sink set aside with a growing penalty) or ``load_balance`` (``round_robin`` or ``random`` over the
sinks not backing off). A sink in no group is a group of one, named like the sink.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["DEFAULT_HOP_HEADER", "ForwardSinkSettings", "SinkGroupSettings"]

DEFAULT_HOP_HEADER = "ingest.hops"


class ForwardSinkSettings(BaseModel):
    """One downstream agent. The client security settings are those of ``ingest-toolkit send``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["forward"]
    channel: str  # the local channel this sink (its group) takes from
    address: str = Field(min_length=3)  # host:port of the downstream agent's gRPC endpoint
    downstream_channel: str | None = None  # None: the downstream agent's default gRPC pipeline
    batch_size: int = Field(default=1000, ge=1)
    linger: float = Field(default=0.05, ge=0)  # seconds a partial batch waits for more events
    timeout: float = Field(default=30.0, gt=0)  # seconds for one downstream put
    parallel_puts: int = Field(default=1, ge=1, le=16)  # a batch is put in this many parts at once
    # batches the group keeps in flight at once: the next is taken and encoded while earlier ones
    # are being put; takes are committed in order (ingest_toolkit/collect/sinks/group.py)
    pipeline: int = Field(default=2, ge=1, le=16)
    token_env: str | None = None  # the environment variable holding the downstream's bearer token
    tls_ca: Path | None = None  # CA of the downstream's certificate; turns TLS on
    tls_cert: Path | None = None  # client certificate for mutual TLS (with tls_key)
    tls_key: Path | None = None
    tls_server_name: str | None = None
    max_message_bytes: int = Field(default=64 << 20, ge=1 << 20)
    hop_header: str = Field(default=DEFAULT_HOP_HEADER, min_length=1)
    max_hops: int = Field(default=8, ge=1)  # an event already forwarded this often is dropped (a loop)

    @field_validator("address")
    @classmethod
    def _fixed_address(cls, address: str) -> str:
        """``host:port`` with a port from 1 to 65535: a forward target needs a fixed address (an agent
        on port 0 listens somewhere else after every restart, and the edge would forward into the void)."""
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{address!r} is not host:port with a fixed port (1 to 65535): a forward target needs "
                             "a fixed address; give the downstream agent a fixed [agent.grpc] port, never 0")
        return address

    @model_validator(mode="after")
    def _pair(self) -> ForwardSinkSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together (a client certificate needs its key)")
        return self


class SinkGroupSettings(BaseModel):
    """``sinks`` share one channel; ``processor`` picks the sink for each batch."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    sinks: list[str] = Field(min_length=1)
    processor: Literal["failover", "load_balance"] = "failover"
    priorities: dict[str, int] = Field(default_factory=dict)  # failover: higher first; unnamed: 0
    selector: Literal["round_robin", "random"] = "round_robin"  # load_balance only
    min_penalty: float = Field(default=0.5, gt=0)  # seconds a failed sink is set aside the first time
    max_penalty: float = Field(default=30.0, gt=0)  # the penalty doubles per failure up to this
    # seconds a batch whose put failed in doubt stays pinned to that sink before any sink may take
    # it (it may then be stored twice: once where it was in doubt); 0: pinned until that sink answers
    release_in_doubt_after: float = Field(default=0.0, ge=0)
    # seconds a sink may fail to be reached (no answer to any put) before the edge's status, its
    # metrics and the forward_sinks_reachable check name it unreachable
    unreachable_after: float = Field(default=120.0, gt=0)

    @model_validator(mode="after")
    def _check(self) -> SinkGroupSettings:
        unknown = sorted(set(self.priorities) - set(self.sinks))
        if unknown:
            raise ValueError(f"priorities name sinks not in this group: {', '.join(unknown)}")
        if len(set(self.sinks)) != len(self.sinks):
            raise ValueError("a sink is listed twice")
        if self.max_penalty < self.min_penalty:
            raise ValueError("max_penalty must be >= min_penalty")
        return self
