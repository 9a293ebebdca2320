"""Spark landing: committed channel events -> partitioned Parquet, exactly once.

>>> config = load_landing_config("conf/landing.toml")                 # doctest: +SKIP
>>> spark = spark_session(config.spark)                                # doctest: +SKIP
>>> result = land_once(InProcessSource(channel, "events"), config, spark)  # doctest: +SKIP

See docs/landing.md for the layout, the exactly-once protocol and its crash table.
"""

from __future__ import annotations

from .batches import LANDED_SCHEMA, build_table, event_id
from .config import LandingConfig, SparkSettings, load_landing_config
from .drain import land_until_empty
from .errors import CommitConflict, LandingError
from .landing import LandingResult, land_once, recover_channel_dir
from .manifest import Manifest, ManifestFile, read_manifests
from .source import InProcessSource, TakeBatch, TakeSource
from .spark import spark_session

__all__ = ["LANDED_SCHEMA", "CommitConflict", "InProcessSource", "LandingConfig", "LandingError", "LandingResult",
           "Manifest", "ManifestFile", "SparkSettings", "TakeBatch", "TakeSource", "build_table", "event_id",
           "land_once", "land_until_empty", "load_landing_config", "read_manifests", "recover_channel_dir",
           "spark_session"]
