"""The Dagster definitions of a channel landing into a Delta or an Iceberg table, on a real
instance (``instance_for_test``) with a real channel and no Spark: the landing asset's kinds and
materialization (format, table version, URI, batch number), every check of the landed table
passing (the reconciliation judged against the batch the newest materialization recorded), the
maintenance asset (compaction, retention) with its job and schedule, files per partition before
and after it, and ``table_format`` of the component overriding ``conf/landing.toml``."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from ingest_toolkit.dagster.factory import ChannelOptions, build_channel_definitions, build_definitions
from ingest_toolkit.dagster.naming import (
    checks_job_name,
    landed_key,
    landing_op_name,
    maintenance_job_name,
    maintenance_key,
    maintenance_op_name,
)
from ingest_toolkit.land.tables.reading import files_per_partition, open_reader
from ingest_toolkit.scaffold import PROJECT_FILES

from .helpers import Setup, events_at, fill, hour_ms, make_setup
from .test_component import _edit, _load, _scaffold

FORMATS = ("delta", "iceberg")
KINDS = {"delta": {"deltalake", "python"}, "iceberg": {"iceberg", "python"}}
LANDED_CHECKS = {"landed_reconciles", "landed_no_duplicate_event_ids", "landed_files_per_partition"}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The empty Dagster project ``ingest-toolkit init`` writes (as in test_component.py)."""
    for relative, text in PROJECT_FILES.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for key in [k for k in os.environ if k.startswith("INGEST_")]:
        monkeypatch.delenv(key)
    yield tmp_path
    for name in [m for m in sys.modules if m == "orchestration" or m.startswith("orchestration.")]:
        del sys.modules[name]


@pytest.fixture(params=FORMATS)
def table_format(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _setup(tmp_path: Path, table_format: str | None, events: int = 400) -> Setup:
    root = tmp_path
    setup = make_setup(root, partitions_start="2026-11-20-00:00", max_files_per_partition=3)
    landing = setup.conf / "landing.toml"
    text = landing.read_text().replace("max_events = 1000\n", "max_events = 100\n")
    text = text.replace("[landing]\n", f'[landing]\niceberg_catalog = "sqlite:///{root}/catalog.db"\n')
    if table_format:
        text = text.replace("[landing]\n", f'[landing]\nformat = "{table_format}"\n')
    landing.write_text(text)
    channel = setup.open()
    fill(channel, events_at(events, hour_ms("2026-11-20T08:00:00+00:00"), step_ms=10_000))  # 08:00 .. 09:06
    channel.close()
    return setup


def _checks(defs: dg.Definitions, instance: dg.DagsterInstance) -> dict[str, dg.AssetCheckEvaluation]:
    result = defs.resolve_job_def(checks_job_name("events")).execute_in_process(instance=instance,
                                                                              raise_on_error=False)
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def test_land_check_and_maintain_a_table_format_on_a_real_instance(tmp_path: Path, table_format: str) -> None:
    setup = _setup(tmp_path, table_format)
    defs = build_definitions(setup.settings, [setup.spec])
    landed_asset = defs.resolve_assets_def(landed_key("events"))
    assert set(landed_asset.specs_by_key[landed_key("events")].kinds) == KINDS[table_format]
    assert maintenance_key("events") in defs.resolve_all_asset_keys()
    schedule = defs.resolve_schedule_def("maintenance_schedule_events")
    assert schedule.cron_schedule == "0 3 * * *" and schedule.job_name == maintenance_job_name("events")
    with dg.instance_for_test() as instance:
        landed = dg.materialize([landed_asset], instance=instance,
                                run_config={"ops": {landing_op_name("events"): {"config": {"batches": 4}}}})
        meta = landed.asset_materializations_for_node(landing_op_name("events"))[0].metadata
        reader = open_reader(defs.resources["landing_events"].config(), "events")  # type: ignore[index]
        assert meta["format"].value == table_format and meta["events"].value == 400
        assert meta["batch_number"].value == 4 and meta["spark_started"].value is False
        assert str(meta["table_version"].value) == str(reader.version())
        assert meta["table_uri"].value == reader.uri and len(meta["table_versions"].value) == 4
        checks = _checks(defs, instance)
        landed_checks = {name: e for name, e in checks.items() if name in LANDED_CHECKS}
        assert {n: e.passed for n, e in landed_checks.items()} == {
            "landed_reconciles": True, "landed_no_duplicate_event_ids": True, "landed_files_per_partition": False}
        reconciled = landed_checks["landed_reconciles"].metadata
        assert reconciled["last_landing_batch"].value == 4 and reconciled["batch_number"].value == 4
        assert reconciled["takes_committed"].value == 400 and reconciled["format"].value == table_format
        crowded = landed_checks["landed_files_per_partition"]
        assert crowded.severity == dg.AssetCheckSeverity.WARN
        assert crowded.metadata["max_files_in_a_partition"].value == 4
        assert all(e.passed for n, e in checks.items() if n not in LANDED_CHECKS), checks

        maintained = defs.resolve_job_def(maintenance_job_name("events")).execute_in_process(instance=instance)
        done = maintained.asset_materializations_for_node(maintenance_op_name("events"))[0].metadata
        assert (done["max_files_per_partition_before"].value, done["max_files_per_partition_after"].value) == (4, 1)
        assert done["format"].value == table_format and done["retention_hours"].value == "168"
        assert max(files_per_partition(reader.files()).values()) == 1
        after = _checks(defs, instance)
        assert {n: e.passed for n, e in after.items() if n in LANDED_CHECKS} == dict.fromkeys(LANDED_CHECKS, True)


def test_the_maintenance_runs_in_the_landing_pool_and_a_parquet_landing_has_none(tmp_path: Path) -> None:
    parquet = _setup(tmp_path, None, events=0)
    defs = build_definitions(parquet.settings, [parquet.spec])
    assert maintenance_key("events") not in defs.resolve_all_asset_keys()
    assert {s.name for s in defs.schedules or []} == {"drain_schedule_events"}
    assert set(defs.resolve_assets_def(landed_key("events")).specs_by_key[landed_key("events")].kinds) == {
        "spark", "parquet"}
    delta = build_channel_definitions(parquet.spec, parquet.settings, ChannelOptions(table_format="delta"))
    maintenance = delta.resolve_assets_def(maintenance_key("events"))
    assert maintenance.op.pool == delta.resolve_assets_def(landed_key("events")).op.pool == "landing-events"
    assert delta.resources["landing_events"].table_format == "delta"  # type: ignore[index]
    assert delta.resources["landing_events"].config().format == "delta"  # type: ignore[index]


def test_table_format_in_defs_yaml_overrides_the_landing_configuration(project: Path) -> None:
    """``table_format: iceberg`` beside ``landing_root`` in a scaffolded defs.yaml (the landing
    configuration says parquet): the landing resource, kinds and maintenance follow it; a format
    that is not one is Dagster's schema error naming the key."""
    make_setup(project)
    defs_yaml = _scaffold(project)
    assert "# table_format: delta" in defs_yaml.read_text()  # scaffolded as a commented choice
    _edit(defs_yaml, table_format="iceberg", schedule__maintenance_cron="30 4 * * *")
    defs = _load(project)
    assert defs.resources["landing_events"].table_format == "iceberg"  # type: ignore[index]
    assert set(defs.resolve_assets_def(landed_key("events")).specs_by_key[landed_key("events")].kinds) == \
        KINDS["iceberg"]
    assert defs.resolve_schedule_def("maintenance_schedule_events").cron_schedule == "30 4 * * *"
    _edit(defs_yaml, table_format="orc")
    with pytest.raises(Exception) as refused:
        _load(project)
    chain, err = [], refused.value  # Dagster's tree names the file; the cause names the key
    while err is not None:
        chain.append(str(err))
        err = err.__cause__ or err.__context__
    assert any("table_format" in text and "orc" in text for text in chain), chain
