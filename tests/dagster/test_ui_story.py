"""What the Dagster UI shows: the channel's state over time, curated partitions where data
starts, names that tell the assets apart, the resources' effective values (no Spark)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pendulum

from ingest_toolkit.dagster.factory import build_definitions, build_resources
from ingest_toolkit.dagster.naming import (
    channel_key,
    curated_key,
    curated_sensor_name,
    landed_key,
    observer_sensor_name,
)
from ingest_toolkit.dagster.partitions import resolve_start
from ingest_toolkit.land.storage import locate

from .helpers import events_at, fill, make_setup


def _observe(defs: dg.Definitions, instance: dg.DagsterInstance) -> dg.SensorResult:
    sensor = defs.resolve_sensor_def(observer_sensor_name("events"))
    result = sensor(dg.build_sensor_context(instance=instance, definitions=defs))
    assert isinstance(result, dg.SensorResult)
    return result


def test_the_channel_is_observed_over_time_instead_of_never_materialized(tmp_path: Path) -> None:
    """The channel asset was an external asset with no events: the UI showed "Never materialized"
    and plotted nothing. It is observable now, and a sensor records its state as observations."""
    setup = make_setup(tmp_path, checkpoint_interval=30.0)
    defs = build_definitions(setup.settings, [setup.spec])
    assert defs.resolve_asset_graph().get(channel_key("events")).is_observable
    channel = setup.open()
    try:
        fill(channel, events_at(300, 0, size=200))
        with channel.transaction() as tx:
            tx.take(100)
            channel.checkpoint()  # 100 in an open take at the checkpoint
            tx.rollback()
        with dg.instance_for_test() as instance:
            result = _observe(defs, instance)
            (observation,) = result.asset_events
            for event in result.asset_events:  # what the sensor daemon does with them
                instance.report_runless_asset_event(event)
            stored = instance.fetch_observations(channel_key("events"), limit=5).records
    finally:
        channel.close()
    assert isinstance(observation, dg.AssetObservation) and observation.asset_key == channel_key("events")
    values = {k: v.value for k, v in observation.metadata.items()}
    assert (values["queue_depth"], values["committed_backlog"], values["in_open_takes"]) == (300, 200, 100)
    assert values["segments"] >= 2 and values["bytes_on_disk"] > 300 * 200 and values["checkpoint_id"] >= 1
    assert values["oldest_event_age_seconds"] >= 0 and values["puts_committed"] == 300
    assert isinstance(observation.metadata["capacity"], dg.TextMetadataValue)  # a constant: not plotted
    assert result.skip_reason and "committed backlog 200 events" in result.skip_reason.skip_message
    assert len(stored) == 1


def test_observing_the_channel_from_the_ui_records_the_same_values(tmp_path: Path) -> None:
    """The asset's Observe button runs its observe function."""
    setup = make_setup(tmp_path)
    channel = setup.open()
    fill(channel, events_at(40, 0))
    channel.close()
    observe = dg.define_asset_job("observe_events", selection=dg.AssetSelection.assets(channel_key("events")))
    defs = dg.Definitions.merge(build_definitions(setup.settings, [setup.spec]), dg.Definitions(jobs=[observe]))
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("observe_events").execute_in_process(instance=instance)
        assert result.success
        (record,) = instance.fetch_observations(channel_key("events"), limit=5).records
    observation = record.asset_observation
    assert observation is not None and observation.metadata["committed_backlog"].value == 40


def test_curated_partitions_start_where_the_landed_data_starts(tmp_path: Path) -> None:
    """With partitions_start 2026-01-01 the UI showed 7,878 hours, 7,877 of them "missing". The
    default is now auto: the earliest landed hour, or partitions_lookback_days (3) before today when
    nothing landed yet (late data and recent history landed after the definitions loaded)."""
    setup = make_setup(tmp_path)
    now = pendulum.now("UTC")
    fresh = build_definitions(setup.settings, [setup.spec]).resolve_assets_def(curated_key("events"))
    keys = fresh.partitions_def.get_partition_keys()  # type: ignore[union-attr]
    floor = now.start_of("day").subtract(days=3)
    assert keys[0] == floor.format("YYYY-MM-DD-HH:mm") and len(keys) <= 4 * 24 + 1, keys[:3]
    landed = tmp_path / "landing" / "events"
    for day, hour in (("2026-11-20", "10"), ("2026-11-20", "08"), ("2026-11-21", "3")):
        (landed / f"event_date={day}" / f"event_hour={hour}").mkdir(parents=True)
    (landed / "event_date=__HIVE_DEFAULT_PARTITION__" / "event_hour=__HIVE_DEFAULT_PARTITION__").mkdir(parents=True)
    defs = build_definitions(setup.settings, [setup.spec])
    keys = defs.resolve_assets_def(curated_key("events")).partitions_def.get_partition_keys()  # type: ignore[union-attr]
    assert keys[0] == "2026-11-20-08:00"
    since = now.start_of("hour") - pendulum.datetime(2026, 11, 20, 8, tz="UTC")
    hours = since.in_hours() + 1  # from 08:00 to the hour in progress (end_offset=1), both included
    assert len(keys) == hours
    assert resolve_start(setup.settings.model_copy(update={"timezone": "Asia/Kolkata"}), locate(str(landed)),
                         now=pendulum.datetime(2026, 11, 25, tz="UTC")) == "2026-11-20-13:00"  # 08:00 UTC = 13:30 IST
    fixed = setup.settings.model_copy(update={"partitions_start": "2026-11-01-00:00"})
    assert resolve_start(fixed, locate(str(landed))) == "2026-11-01-00:00"


def test_no_curated_partition_before_the_first_landed_hour(tmp_path: Path) -> None:
    """A first deployment whose data began an hour ago showed the three days of the lookback before
    it as "missing" partitions: once data has landed, the partitions start at its first hour."""
    setup = make_setup(tmp_path)
    first = pendulum.now("UTC").start_of("hour").subtract(hours=1)
    landed = tmp_path / "landing" / "events" / f"event_date={first.format('YYYY-MM-DD')}"
    (landed / f"event_hour={first.format('HH')}").mkdir(parents=True)
    defs = build_definitions(setup.settings, [setup.spec])
    keys = defs.resolve_assets_def(curated_key("events")).partitions_def.get_partition_keys()  # type: ignore[union-attr]
    assert keys[0] == first.format("YYYY-MM-DD-HH:mm") and len(keys) in (2, 3), keys  # that hour to the current one


def test_a_landed_hour_before_the_first_partition_is_named_by_the_curated_sensor(tmp_path: Path) -> None:
    """Older data that lands after the definitions loaded has no partition yet: said, not dropped."""
    setup = make_setup(tmp_path, partitions_start="2026-11-21-00:00")
    defs = build_definitions(setup.settings, [setup.spec])
    sensor = defs.resolve_sensor_def(curated_sensor_name("events"))
    with dg.instance_for_test() as instance:
        instance.report_runless_asset_event(dg.AssetMaterialization(landed_key("events"), metadata={
            "partitions": ["event_date=2026-11-20/event_hour=08"]}))
        result = sensor(dg.build_sensor_context(instance=instance, definitions=defs))
    assert isinstance(result, dg.SensorResult) and not result.run_requests and result.skip_reason
    message = result.skip_reason.skip_message
    assert "before the first curated partition 2026-11-21T00:00:00+00:00: ['2026-11-20T08:00:00Z']" in message
    assert "reload the code location" in message


def test_the_three_assets_of_a_channel_have_names_of_their_own(tmp_path: Path) -> None:
    """The graph labels a node with the last part of its key: channel/events, landed/events and
    curated/events were three nodes called "events"."""
    setup = make_setup(tmp_path)
    defs = build_definitions(setup.settings, [setup.spec])
    keys = [channel_key("events"), landed_key("events"), curated_key("events")]
    assert [k.path[-1] for k in keys] == ["events_channel", "events_landed", "events_curated"]
    assert {k for k in defs.resolve_all_asset_keys()} == set(keys)
    groups = {k.path[-1]: defs.resolve_asset_graph().get(k).group_name for k in keys}
    assert groups == {"events_channel": "channels", "events_landed": "landing", "events_curated": "curated"}


def test_the_landing_resource_shows_the_effective_values(tmp_path: Path) -> None:
    """The resource page showed null for root, agent and master (the file's values applied only
    at run time)."""
    setup = make_setup(tmp_path)
    landing_toml = (setup.conf / "landing.toml").read_text()
    with_agent = landing_toml.replace("[landing]\n", '[landing]\nagent = "127.0.0.1:7431"\n')
    (setup.conf / "landing.toml").write_text(with_agent)
    resources = build_resources(setup.settings, setup.spec)
    landing, spark = resources["landing_events"], resources["spark_events"]
    assert landing.root == (tmp_path / "landing").as_uri()  # type: ignore[attr-defined]
    assert landing.agent == "127.0.0.1:7431"  # type: ignore[attr-defined]
    assert spark.master == "local[2]"  # type: ignore[attr-defined]
    assert landing.config().root == landing.root  # type: ignore[attr-defined]  # what a run uses


def test_a_remote_landing_root_starts_at_the_lookback_without_touching_it(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    """With an hdfs:// root, loading the definitions tried pyarrow's libhdfs and printed dozens of
    "dlopen(... libjvm.so) failed" lines. A remote Parquet root is not listed: the start is the lookback."""
    setup = make_setup(tmp_path)
    (setup.conf / "landing.toml").write_text('[landing]\nroot = "hdfs://127.0.0.1:1/landing"\n')
    caplog.set_level("INFO", logger="ingest_toolkit.dagster.partitions")
    defs = build_definitions(setup.settings, [setup.spec])
    keys = defs.resolve_assets_def(curated_key("events")).partitions_def.get_partition_keys()  # type: ignore[union-attr]
    assert keys[0] == pendulum.now("UTC").start_of("day").subtract(days=3).format("YYYY-MM-DD-HH:mm")
    assert "reads only local Parquet landing roots; hdfs://127.0.0.1:1/landing: starting 3 days back" in caplog.text


def _numbers(observation: dg.AssetObservation) -> set[str]:
    """The keys the asset page plots: numeric metadata."""
    return {k for k, v in observation.metadata.items() if isinstance(v, (dg.IntMetadataValue, dg.FloatMetadataValue))}


def test_an_observation_records_no_number_it_did_not_read(tmp_path: Path) -> None:
    """When `dg dev` started, the channel's plots began with a flat line at zero: an agent not yet
    reachable, or directories not yet created, were recorded as 0 segments and 0 bytes. What was
    not read is not recorded (the reason is, as text); the first point is the first real reading."""
    from ingest_toolkit.dagster.observations import channel_observation
    from ingest_toolkit.orchestrate.remote import AgentAccess, AgentState

    setup = make_setup(tmp_path)
    unreachable = AgentState(setup.spec, AgentAccess("127.0.0.1:1", timeout=2.0))
    observation, summary = channel_observation(setup.spec, unreachable)
    assert _numbers(observation) == set(), observation.metadata
    assert "127.0.0.1:1" in str(observation.metadata["checkpoint"].value) and "127.0.0.1:1" in summary
    before_the_agent_ran, _summary = channel_observation(setup.spec)  # no directories yet
    assert _numbers(before_the_agent_ran) == set(), before_the_agent_ran.metadata
    channel = setup.open()
    fill(channel, events_at(300, 0, size=200))
    channel.close()
    read, summary = channel_observation(setup.spec)
    assert {"segments", "bytes_on_disk", "committed_backlog", "checkpoint_id"} <= _numbers(read)


def test_sizes_are_shown_with_their_unit(tmp_path: Path) -> None:
    """`bytes_on_disk 1647012` read as a raw number: Dagster's numbers have no unit, so the size is
    also recorded as text with one, beside the exact number the plot draws."""
    from ingest_toolkit.dagster.observations import channel_observation
    from ingest_toolkit.numbers import byte_size

    assert [byte_size(n) for n in (12, 1647012, 250_000_000, 3_200_000_000)] == [
        "12 B", "1.6 MB", "250 MB", "3.2 GB"]
    setup = make_setup(tmp_path)
    channel = setup.open()
    fill(channel, events_at(300, 0, size=200))
    channel.close()
    observation, summary = channel_observation(setup.spec)
    size = observation.metadata["bytes_on_disk"].value
    assert isinstance(observation.metadata["disk_use"], dg.TextMetadataValue)
    assert observation.metadata["disk_use"].value == byte_size(int(size))  # type: ignore[arg-type]
    assert summary.endswith(f"{byte_size(int(size))} on disk")  # type: ignore[arg-type]


def test_each_check_links_its_runbook_section_with_a_real_href(tmp_path: Path) -> None:
    """The runbook link of each check had an empty href in the UI (a docs/ path relative to a
    checkout, shown as a path): with runbook_url empty it is the file:// URL of the runbook installed
    with the toolkit, at the check's section."""
    from ingest_toolkit.manual import docs_dir

    setup = make_setup(tmp_path)
    channel = setup.open()
    fill(channel, events_at(10, 0))
    channel.close()
    defs = build_definitions(setup.settings, [setup.spec])
    job = dg.define_asset_job("checks", selection=dg.AssetSelection.checks_for_assets(channel_key("events")))
    defs = dg.Definitions.merge(defs, dg.Definitions(jobs=[job]))
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("checks").execute_in_process(instance=instance, raise_on_error=False)
    evaluations = result.get_asset_check_evaluations()
    assert evaluations
    installed = docs_dir()
    assert installed is not None
    for evaluation in evaluations:
        link = evaluation.metadata["runbook"]
        assert isinstance(link, dg.UrlMetadataValue), (evaluation.check_name, link)
        assert link.url == f"{(installed / 'runbook.md').as_uri()}#{evaluation.check_name}"
        assert (installed / "runbook.md").read_text().count(f"## {evaluation.check_name} ") == 1
