"""Running the example DAGs with ``dag.test()`` on a real channel (tests/orchestrate/helpers)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from ..orchestrate.helpers import Setup, make_setup
from .conftest import DAGS

__all__ = ["DagResult", "airflow_setup", "asset_events", "landed_table", "run_dag"]


def airflow_setup(root: Path, **orchestrate: object) -> Setup:
    """A configuration directory as make_setup writes it, plus ``orchestrate.toml`` (the
    thresholds' orchestrator-neutral home): ``curated_root`` under ``root``, a sensor threshold
    of 100 events, and ``orchestrate`` values."""
    capacity = int(orchestrate.pop("capacity", 10_000))  # type: ignore[call-overload]
    setup = make_setup(root, capacity=capacity)
    values: dict[str, object] = {"curated_root": str(root / "curated"), "sensor_min_backlog": 100, **orchestrate}
    lines = [f"{key} = {value!r}" if not isinstance(value, str) else f'{key} = "{value}"'
             for key, value in values.items()]
    (setup.conf / "orchestrate.toml").write_text("[orchestrate]\n" + "\n".join(lines) + "\n")
    return setup


@dataclass
class DagResult:
    state: str
    tasks: dict[str, str]  # task id -> state
    xcom: dict[str, Any]  # task id -> return value


def run_dag(dag_id: str, logical_date: datetime | None = None) -> DagResult:
    """``dag.test()`` of ``dag_id`` as Airflow parsed it from the dags folder; the states and
    return values of its tasks, read back from the metadata database. Retries are turned off: a
    test looks at the first failure (``dag.test()`` would wait out each ``retry_delay``)."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    bag = DagBag(dag_folder=str(DAGS))
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag(dag_id)
    for task in dag.tasks:
        task.retries = 0
    run = dag.test(logical_date=logical_date) if logical_date is not None else dag.test()
    with create_session() as session:
        tis = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id,
                                                 TaskInstance.run_id == run.run_id).all()
        tasks = {ti.task_id: str(ti.state) for ti in tis}
        rows = session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id == run.run_id,
                                               XComModel.key == "return_value").all()
        xcom = {row.task_id: XComModel.deserialize_value(row) for row in rows}
    return DagResult(str(run.state), tasks, xcom)


def landed_table(root: Path, channel: str = "events") -> Any:
    """The landed table of ``channel`` under ``root``/landing (every data file, pyarrow)."""
    return pq.read_table(root / "landing" / channel)


def asset_events(name: str) -> list[dict[str, Any]]:
    """The extras of the events of asset ``name`` recorded in the metadata database, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (session.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                .filter(AssetModel.name == name).order_by(AssetEvent.id).all())
        return [dict(row.extra) for row in rows]
