"""``ChannelBacklogSensor(deferrable=False)``: the sensor pokes in the worker, never defers (a
deployment without a triggerer), and succeeds once the backlog reaches the threshold."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, NoReturn

import pytest

from ingest_toolkit.airflow import ChannelBacklogSensor

from ..orchestrate.helpers import Setup, events_at, fill
from .conftest import DAGS
from .helpers import airflow_setup, run_dag

pytestmark = pytest.mark.integration

_DAG = '''
from datetime import UTC, datetime

from airflow.sdk import DAG

from ingest_toolkit.airflow import ChannelBacklogSensor

with DAG(dag_id="poke_for_backlog", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)):
    ChannelBacklogSensor(task_id="wait_for_backlog", channel="events", deferrable=False, poke_interval=0.2,
                         timeout=120)
'''


def _put(setup: Setup, count: int) -> None:
    """Commit ``count`` events and checkpoint (a running agent checkpoints every interval)."""
    channel = setup.open()
    try:
        fill(channel, events_at(count, 1_763_798_400_000))
        channel.checkpoint()
    finally:
        channel.close()


def test_without_deferral_the_sensor_pokes_until_the_backlog_is_there(tmp_path: Path, airflow_db: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    setup = airflow_setup(tmp_path)  # sensor_min_backlog = 100
    monkeypatch.setenv("INGEST_CONF_DIR", str(setup.conf))
    _put(setup, 60)
    pokes: list[Any] = []
    poke = ChannelBacklogSensor.poke

    def counted(self: ChannelBacklogSensor, context: Any) -> Any:
        pokes.append(poke(self, context))
        if len(pokes) == 3:  # the third poke found 60 events: 40 more arrive meanwhile
            threading.Thread(target=_put, args=(setup, 40)).start()
        return pokes[-1]

    def never(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise AssertionError("the sensor deferred with deferrable=False")

    monkeypatch.setattr(ChannelBacklogSensor, "poke", counted)
    monkeypatch.setattr(ChannelBacklogSensor, "defer", never)
    (DAGS / "poke_for_backlog.py").write_text(_DAG)
    try:
        done = run_dag("poke_for_backlog")
    finally:
        (DAGS / "poke_for_backlog.py").unlink()
    assert done.tasks == {"wait_for_backlog": "success"}, done.tasks
    assert len(pokes) >= 4 and not any(p.is_done for p in pokes[:3])
    event = done.xcom["wait_for_backlog"]
    assert event["trigger"] == "backlog" and "committed backlog 100 events (threshold 100)" in event["reason"]
    assert event["state_from"].startswith("checkpoint directory ")


def test_the_poke_interval_is_the_settings_sensor_interval_unless_given(tmp_path: Path) -> None:
    setup = airflow_setup(tmp_path, sensor_interval_seconds=7)
    _put(setup, 100)
    sensor = ChannelBacklogSensor(task_id="w", channel="events", conf_dir=str(setup.conf), deferrable=False)
    assert sensor.execute({})["trigger"] == "backlog"  # type: ignore[arg-type]
    assert sensor.poke_interval == 7.0
    given = ChannelBacklogSensor(task_id="g", channel="events", conf_dir=str(setup.conf), deferrable=False,
                                 poke_interval=3)
    given.execute({})  # type: ignore[arg-type]
    assert given.poke_interval == 3.0
