"""Shared test configuration."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Timing is measured by bench/, not by tests: a per-example deadline only makes property tests
# flaky on a loaded 2-core machine.
settings.register_profile("default", deadline=None)
settings.load_profile("default")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with a slow or integration test run first (a stable sort: the order inside a file,
    and among the other files, stays). With ``-n 2`` each worker starts on the long files and
    both end on the many short ones, instead of one worker finishing a long file alone."""
    heavy = {item.path for item in items
             if item.get_closest_marker("slow") is not None or item.get_closest_marker("integration") is not None}
    items.sort(key=lambda item: item.path not in heavy)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """ONE local SparkSession per pytest process (a JVM start costs 5-12 s): every Spark test,
    landing and Dagster alike, shares it. Built with the landing's own ``spark_session`` on
    ``local[2]`` with small shuffle settings; stopped at the end of the test session. Its Hadoop
    client writes HDFS files with replication 1, as the tests' one-DataNode HDFS needs (a file
    gets its writer's replication, 3 by default: docs/landing.md, "Replication")."""
    from ingest_toolkit.land import SparkSettings, spark_session

    session = spark_session(SparkSettings(
        master="local[2]", app_name="ingest-toolkit-tests",
        conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2", "spark.driver.memory": "1g",
              "spark.hadoop.dfs.replication": "1"}))
    yield session
    session.stop()
