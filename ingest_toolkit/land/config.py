"""Validated, frozen settings of the Spark landing, loaded from ``conf/landing.toml``.

``[landing]`` holds :class:`LandingConfig` fields, ``[spark]`` (optional) the
:class:`SparkSettings`, with free-form Spark properties in ``[spark.conf]``. Top-level keys of
either table can be overridden from the environment (``INGEST_LANDING__ROOT=hdfs://nn/landing``,
``INGEST_SPARK__MASTER=spark://host:7077``), see :mod:`ingest_toolkit.settings`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from ..errors import ConfigError
from ..settings import env_overrides, env_variables, invalid_settings, load_table, validation_problems

if TYPE_CHECKING:
    from ..rpc.client import AgentClient

__all__ = ["LandingConfig", "SparkSettings", "agent_client", "load_landing_config", "root_uri"]

MiB = 1 << 20

# Properties every landing session needs; [spark.conf] may override the others, not these.
REQUIRED_SPARK_CONF: dict[str, str] = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",  # INT96 is deprecated and lossy
}
DEFAULT_SPARK_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.memory": "2g",
}


class SparkSettings(BaseModel):
    """Where Spark runs. ``remote`` (a Spark Connect ``sc://host:port`` URL) wins over ``master``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    master: str = "local[*]"
    remote: str | None = None
    app_name: str = "ingest-toolkit-landing"
    conf: dict[str, str] = Field(default_factory=dict)
    log_level: str = "WARN"

    @field_validator("remote")
    @classmethod
    def _connect_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("sc://"):
            raise ValueError("remote must be a Spark Connect URL (sc://host:port)")
        return value or None

    @field_validator("conf", mode="before")
    @classmethod
    def _strings(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
        return value

    def effective_conf(self) -> dict[str, str]:
        """Defaults, then ``conf``, then the properties the landing cannot work without."""
        return {**DEFAULT_SPARK_CONF, **self.conf, **REQUIRED_SPARK_CONF}


class LandingConfig(BaseModel):
    """How a landing run writes.

    * ``root``: a URI (``file:///...``, ``hdfs://namenode:8020/...``, any Hadoop-compatible
      scheme Spark can write) or a local path, made absolute against the current directory.
    * ``max_events``: events per take transaction (an in-process source also caps it at the
      channel's ``transaction_capacity``).
    * ``target_file_bytes``: files are split around this size (``maxRecordsPerFile`` from the
      batch's average row size); a batch never writes more files per partition than Spark tasks.
    * ``storage``: how manifests and file moves reach the file system: ``hadoop`` (the driver
      JVM's Hadoop FileSystem, same settings as Spark), ``arrow`` (``pyarrow.fs``, the only one
      available under Spark Connect), ``auto`` (hadoop when the session has a JVM).
    * ``staging_grace_seconds``: a staging directory without a manifest (a failed run's
      leftover) is deleted once it is at least this old; see docs/landing.md.
    * ``agent``: ``host:port`` of an agent: take through its gRPC API instead of opening the
      channel in-process. ``channel_conf`` / ``agent_conf``: where in-process channel settings
      come from (a ``[channel]`` table, or the ``[channels.<name>]`` tables of the agent's conf).
      ``agent_token_env`` names the environment variable holding the agent's bearer token;
      ``agent_tls_ca`` is the PEM file that turns TLS on for the agent connection, and
      ``agent_tls_cert`` + ``agent_tls_key`` the client certificate an agent with mutual TLS
      asks for (both or neither).
    * ``format``: the landed table's format: ``parquet`` (plain directories and the landing's
      manifest log, written by Spark), ``delta`` or ``iceberg`` (written and committed by delta-rs
      or PyIceberg, no Spark needed; docs/landing.md, "Table formats"). ``iceberg_catalog``: the
      SQLAlchemy URL of the Iceberg SQL catalog (a SQLite file by default, relative paths against
      the current directory; ``postgresql+psycopg2://...`` for writers on several hosts), and
      ``iceberg_namespace`` the namespace of the tables (``<namespace>.<channel>``).
      ``retention_hours``: the maintenance's retention window for Delta and Iceberg tables
      (vacuum, snapshot expiry; default 7 days), refused below the landing's longest write
      (:mod:`ingest_toolkit.land.tables.maintain`).
    * ``lease_seconds``: lease of a remote take. While the batch is being written the landing
      renews it every third of its length, for at most ``lease_renewal_max_seconds`` in all
      (0: never renewed): a landing that hangs still loses its take, one that works does not.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    root: str = "var/landing"
    max_events: int = Field(100_000, ge=1)
    format: Literal["parquet", "delta", "iceberg"] = "parquet"
    iceberg_catalog: str = "sqlite:///var/iceberg/catalog.db"
    iceberg_namespace: str = Field("ingest", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    retention_hours: float = Field(168.0, gt=0.0)
    compression: Literal["snappy", "zstd", "gzip", "lz4", "none", "uncompressed"] = "snappy"
    target_file_bytes: int = Field(128 * MiB, ge=1 << 16)
    write_partitions: int | None = Field(None, ge=1)
    storage: Literal["auto", "hadoop", "arrow"] = "auto"
    staging_grace_seconds: float = Field(3600.0, ge=0.0)
    agent: str | None = None
    agent_token_env: str | None = None
    agent_tls_ca: str | None = None
    agent_tls_cert: str | None = None
    agent_tls_key: str | None = Field(None, validate_default=True)
    lease_seconds: float = Field(600.0, gt=0.0)
    lease_renewal_max_seconds: float = Field(3600.0, ge=0.0)
    channel_conf: str | None = None
    agent_conf: str | None = "conf/agent.toml"
    spark: SparkSettings = Field(default_factory=SparkSettings)

    @field_validator("root")
    @classmethod
    def _as_uri(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("root must not be empty")
        return root_uri(value)

    @field_validator("iceberg_catalog")
    @classmethod
    def _catalog_url(cls, value: str) -> str:
        if not value.startswith(("sqlite:///", "postgresql", "mysql")):
            raise ValueError("iceberg_catalog must be a SQLAlchemy URL: sqlite:///path/catalog.db, "
                             "or postgresql+psycopg2://user@host/db for writers on several hosts")
        if value.startswith("sqlite:///") and value != "sqlite:///:memory:" and not value.startswith("sqlite:////"):
            return "sqlite:///" + str(Path(value[len("sqlite:///"):]).resolve())
        return value

    @field_validator("agent_tls_key")
    @classmethod
    def _client_pair(cls, value: str | None, info: ValidationInfo) -> str | None:
        if (info.data.get("agent_tls_cert") is None) != (value is None):
            raise ValueError("agent_tls_cert and agent_tls_key go together: a client certificate needs its key")
        return value

    @classmethod
    def build(cls, **values: Any) -> LandingConfig:
        """Validate ``values``; a problem raises ConfigError naming the key (``landing.<key>``)."""
        return cls.validate_tables(values)

    @classmethod
    def validate_tables(cls, values: dict[str, Any], *, source: str | os.PathLike[str] | None = None,
                        env: Mapping[str, str] | None = None) -> LandingConfig:
        """Validate ``[landing]`` values (``spark``: the ``[spark]`` table); the error names the file
        ``source``, each key (``landing.<key>``, ``spark.<key>``) and the variable of a value that
        came from the environment (``env``: key -> variable)."""
        try:
            return cls(**values)
        except ValidationError as err:
            problems = [(k if k.startswith("spark") else f"landing.{k}" if k else "landing", m)
                        for k, m in validation_problems(err)]
            raise invalid_settings("landing configuration", problems, source=source, env=env) from None


def agent_client(config: LandingConfig, token: str | None = None, timeout: float = 60.0) -> AgentClient:
    """An :class:`~ingest_toolkit.rpc.client.AgentClient` for ``config.agent``: ``token``, else the
    bearer token from ``agent_token_env``; TLS from ``agent_tls_ca`` / ``agent_tls_cert`` /
    ``agent_tls_key``; ``timeout``: seconds per call. A bad TLS file raises ConfigError naming its
    ``landing.*`` key."""
    from ..rpc.client import AgentClient

    if not config.agent:
        raise ConfigError("no agent configured: set [landing] agent (host:port)", key="landing.agent")
    if token is None and config.agent_token_env:
        token = os.environ.get(config.agent_token_env)
        if not token:
            raise ConfigError(f"[landing] agent_token_env names {config.agent_token_env}, which is not set",
                              key="landing.agent_token_env")
    names = {"ca": "landing.agent_tls_ca", "cert": "landing.agent_tls_cert", "key": "landing.agent_tls_key"}
    return AgentClient(config.agent, token=token, tls_ca=config.agent_tls_ca, tls_cert=config.agent_tls_cert,
                       tls_key=config.agent_tls_key, tls_names=names, timeout=timeout)


def root_uri(value: str) -> str:
    """A URI for ``value``: kept when it has a scheme, else an absolute ``file://`` URI."""
    if "://" in value:
        return value.rstrip("/")
    return Path(value).resolve().as_uri()


def load_landing_config(path: Path | str, **overrides: Any) -> LandingConfig:
    """Read ``[landing]`` and the optional ``[spark]`` table of ``path`` (env overrides apply)."""
    path = Path(path)
    values = load_table(path, "landing")
    try:
        spark = load_table(path, "spark")
    except ConfigError as err:
        if err.key != "spark" or not path.exists():
            raise
        spark = env_overrides("spark")  # no [spark] table: the environment alone
    env = {**env_variables("landing"), **env_variables("spark")}
    for key in overrides:
        env.pop(f"landing.{key}", None)  # a command-line value wins over the variable
    return LandingConfig.validate_tables({**values, **overrides, "spark": spark}, source=path, env=env)
