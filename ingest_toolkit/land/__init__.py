"""Spark landing: committed channel events -> partitioned Parquet, exactly once.

>>> config = load_landing_config("conf/landing.toml")                 # doctest: +SKIP
>>> spark = spark_session(config.spark)                                # doctest: +SKIP
>>> result = land_once(InProcessSource(channel, "events"), config, spark)  # doctest: +SKIP

What ``ingest-toolkit land`` and the Dagster asset run: the route (in-process, or the agent that
owns the channel), then the batches, Spark started only when there is something to land:

>>> run = land_channel(resolve_route(config, "events"), lambda: spark_session(config.spark))  # doctest: +SKIP

See docs/landing.md for the layout, the exactly-once protocol and its crash table.
"""

from __future__ import annotations

from .batches import LANDED_SCHEMA, build_table, event_id
from .config import LandingConfig, SparkSettings, load_landing_config
from .drain import land_until_empty
from .errors import CommitConflict, LandingError
from .landing import LandingResult, land_once, recover_channel_dir
from .manifest import Manifest, ManifestFile, read_manifests
from .route import Route, resolve_route
from .run import LandingRun, land_channel
from .source import InProcessSource, TakeBatch, TakeSource
from .spark import spark_session

__all__ = ["LANDED_SCHEMA", "CommitConflict", "InProcessSource", "LandingConfig", "LandingError", "LandingResult",
           "LandingRun", "Manifest", "ManifestFile", "Route", "SparkSettings", "TakeBatch", "TakeSource", "build_table",
           "event_id", "land_channel", "land_once", "land_until_empty", "load_landing_config", "read_manifests",
           "recover_channel_dir", "resolve_route", "spark_session"]
