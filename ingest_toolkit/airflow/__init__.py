"""Airflow 3 provider: the pipeline of :mod:`ingest_toolkit.orchestrate` as a deferrable sensor,
operators and assets (the ``[airflow]`` extra; example DAGs in ``docs/examples/airflow``).

* :class:`ChannelBacklogSensor` (:mod:`.sensors`): deferred to :class:`ChannelBacklogTrigger`
  (:mod:`.triggers`), which polls ``checkpoint.meta`` in the triggerer with the Dagster sensor's
  thresholds;
* :class:`LandChannelOperator`, :class:`CurateHourOperator`, :class:`ChannelCheckOperator`,
  :class:`MaintainTableOperator` (:mod:`.operators`): the landing, the curation of a data
  interval, one check, the upkeep of a Delta or Iceberg table;
* :func:`landed_asset`, :func:`curated_asset` (:mod:`.assets`): the operators' outlets;
* :class:`IngestAgentHook` (:mod:`.hooks`): the agent's address, token and TLS files from an
  ``ingest_agent`` connection.

Nothing here holds pipeline logic: every decision, run and check is a function of
:mod:`ingest_toolkit.orchestrate` that the Dagster definitions call too. Without the extra,
importing this package raises :class:`~ingest_toolkit.extras.MissingExtraError` (one line naming
``pip install 'ingest-toolkit[airflow]'``); the rest of the toolkit never imports it.
"""

from __future__ import annotations

from ..extras import extra_for

try:
    import airflow.sdk  # noqa: F401
except ModuleNotFoundError as err:
    missing = extra_for(err, "ingest_toolkit.airflow")
    if missing is None:
        raise
    raise missing from None

from .assets import curated_asset, landed_asset  # noqa: E402
from .hooks import IngestAgentHook  # noqa: E402
from .operators import (  # noqa: E402
    CHANNEL_CHECKS,
    CURATED_CHECKS,
    LANDED_CHECKS,
    ChannelCheckOperator,
    CheckFailedError,
    CurateHourOperator,
    LandChannelOperator,
    MaintainTableOperator,
)
from .sensors import ChannelBacklogSensor  # noqa: E402
from .triggers import ChannelBacklogTrigger  # noqa: E402

__all__ = ["CHANNEL_CHECKS", "CURATED_CHECKS", "LANDED_CHECKS", "ChannelBacklogSensor", "ChannelBacklogTrigger",
           "ChannelCheckOperator", "CheckFailedError", "CurateHourOperator", "IngestAgentHook",
           "LandChannelOperator", "MaintainTableOperator", "curated_asset", "landed_asset"]
