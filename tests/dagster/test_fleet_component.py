"""A fleet's component instances, without agent processes: one per agent and channel, named after
the agent, for channels this side knows only by their agents' addresses; an agent that does not
answer is a sensor skip and a drain skip that name it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import dagster as dg

from ingest_toolkit.dagster.naming import channel_key, curated_key, landed_key
from ingest_toolkit.orchestrate.verdict import CHECKS
from tests.fleet.harness import free_port

from .test_component import _edit, _load, _names, _scaffold, project  # noqa: F401  (project: a fixture)


def _fleet(project: Path) -> dict[str, str]:  # noqa: F811
    (project / "conf").mkdir(exist_ok=True)
    (project / "conf" / "agent.toml").unlink(missing_ok=True)
    (project / "conf" / "landing.toml").write_text('[landing]\nroot = "var/landing"\n')
    addresses = {name: f"127.0.0.1:{free_port()}" for name in ("agg1", "agg2")}  # nobody listens there
    for name, address in addresses.items():
        _scaffold(project, f"{name}_events", channel="events", agent=address, agent_name=name)
    return addresses


def test_one_instance_per_agent_and_channel_named_after_the_agent(project: Path) -> None:  # noqa: F811
    addresses = _fleet(project)
    defs = _load(project)
    names = _names(defs)
    for name, address in addresses.items():
        node = f"{name}_events"
        assert {f"{node}_channel", f"{node}_landed", f"{node}_curated"} <= names["assets"]
        assert {f"landing_sensor_{node}", f"curated_sensor_{node}", f"channel_observer_{node}"} <= names["sensors"]
        assert {f"land_{node}", f"curate_{node}", f"check_{node}"} <= names["jobs"]
        assert {f"landing_{node}", f"spark_{node}", f"curated_{node}"} <= names["resources"]
        assert defs.get_assets_def(landed_key(node)).op.pool == f"landing-{node}"
        assert defs.get_assets_def(curated_key(node)).op.pool == "curated-events"  # the table's: shared
        graph = defs.resolve_asset_graph()
        assert graph.get(channel_key(node)).metadata["agent"] == address
    assert "events_landed" not in names["assets"]


def test_with_curate_off_an_instance_leaves_the_shared_table_to_the_other(project: Path) -> None:  # noqa: F811
    """Both aggregators land ``events`` into one table; one instance curates it: the other has no
    curated asset, job, sensor or check (without it, the two share the table's curated pool)."""
    _fleet(project)
    _edit(project / "orchestration" / "defs" / "agg2_events" / "defs.yaml", curate=False)
    names = _names(_load(project))
    assert "agg1_events_curated" in names["assets"] and "agg2_events_curated" not in names["assets"]
    assert {"curate_agg1_events", "land_agg2_events", "check_agg2_events"} <= names["jobs"]
    assert "curate_agg2_events" not in names["jobs"] and "curated_sensor_agg2_events" not in names["sensors"]
    agg2_checks = {check for check in names["checks"] if check.startswith("agg2_")}
    not_curated = [info for info in CHECKS.values() if info.target != "curated"]
    assert len(agg2_checks) == len(not_curated) and not {check for check in agg2_checks if "_curated:" in check}


def test_an_agent_that_does_not_answer_is_a_skip_naming_it(project: Path) -> None:  # noqa: F811
    addresses = _fleet(project)
    defs = _load(project)
    with dg.instance_for_test() as instance:
        for name, address in addresses.items():
            result = defs.get_sensor_def(f"landing_sensor_{name}_events")(
                dg.build_sensor_context(instance=instance, definitions=defs))
            assert isinstance(result, dg.SensorResult) and not result.run_requests
            assert result.skip_reason is not None
            assert f"agent {address} did not serve the status of channel events" in str(
                result.skip_reason.skip_message)
            drain = defs.get_schedule_def(f"drain_schedule_{name}_events")(
                dg.build_schedule_context(instance=instance, scheduled_execution_time=dt.datetime(2026, 11, 26)))
            assert isinstance(drain, dg.SkipReason) and address in str(drain.skip_message)
