"""The Dagster component: registered for ``dg``, scaffolded into a ``defs.yaml``, loaded from a
defs folder into everything a channel's definitions hold, its values applied, bad values named
(file and key) when the code location loads, never at import."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster.components import ScaffoldRequest

from ingest_toolkit.dagster import IngestChannelComponent
from ingest_toolkit.dagster.component import IngestChannelScaffolder, IngestChannelScaffoldParams
from ingest_toolkit.dagster.factory import build_channel_definitions
from ingest_toolkit.dagster.naming import curated_key, landed_key
from ingest_toolkit.errors import ConfigError
from ingest_toolkit.scaffold import PROJECT_FILES

from .helpers import Setup, make_setup

REPO = Path(__file__).resolve().parents[2]
TYPE = "ingest_toolkit.dagster.IngestChannelComponent"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The empty Dagster project ``ingest-toolkit init`` writes, importable from ``tmp_path``, the
    current directory (relative paths in defs.yaml are relative to it)."""
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


def _scaffold(project: Path, name: str = "events", **params: str) -> Path:
    IngestChannelScaffolder().scaffold(ScaffoldRequest(
        type_name=TYPE, target_path=project / "orchestration" / "defs" / name, scaffold_format="yaml",
        project_root=project, params=IngestChannelScaffoldParams(**params)))
    return project / "orchestration" / "defs" / name / "defs.yaml"


def _edit(defs_yaml: Path, **attributes: object) -> None:
    document = yaml.safe_load(defs_yaml.read_text())
    for path, value in attributes.items():
        node = document["attributes"]
        *parents, last = path.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    defs_yaml.write_text(yaml.safe_dump(document))


def _load(project: Path) -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=project / "orchestration")


def _setup(project: Path) -> Setup:
    return make_setup(project)  # conf/agent.toml (channel events), conf/landing.toml


def _names(defs: dg.Definitions) -> dict[str, set[str]]:
    graph = defs.resolve_asset_graph()
    return {"assets": {k.to_user_string() for k in defs.resolve_all_asset_keys()},
            "checks": {f"{k.asset_key.to_user_string()}:{k.name}" for k in graph.asset_check_keys},
            "sensors": {s.name for s in defs.sensors or []},
            "schedules": {s.name for s in defs.schedules or []},
            "jobs": {j.name for j in defs.resolve_all_job_defs() if not j.name.startswith("__")},
            "resources": set(defs.resources or {})}


def test_dg_finds_the_component_through_the_entry_point() -> None:
    from dagster.components.core.package_entry import discover_entry_point_package_objects

    found = {f"{key.namespace}.{key.name}": obj for key, obj in discover_entry_point_package_objects().items()}
    assert found.get(TYPE) is IngestChannelComponent


def test_a_scaffolded_instance_yields_every_definition_of_the_channel(project: Path) -> None:
    setup = _setup(project)
    defs_yaml = _scaffold(project)
    document = yaml.safe_load(defs_yaml.read_text())
    assert document["type"] == TYPE
    assert document["attributes"]["channel"] == "events"
    assert set(document["attributes"]) >= {"agent_conf", "landing_conf", "landing_root", "curated_root", "partitions",
                                           "schedule", "sensor", "pools", "checks"}
    defs = _load(project)
    dg.Definitions.validate_loadable(defs)
    names = _names(defs)
    assert names == _names(build_channel_definitions(setup.spec, setup.settings))
    assert names["assets"] == {"events_channel", "events_landed", "events_curated"}
    assert len(names["checks"]) == 16  # seven channel checks, four landed, five curated
    assert names["sensors"] == {"landing_sensor_events", "curated_sensor_events", "channel_observer_events"}
    assert names["schedules"] == {"drain_schedule_events"}
    assert names["jobs"] == {"land_events", "curate_events", "check_events"}
    assert names["resources"] == {"landing_events", "spark_events", "curated_events"}


def test_the_values_of_defs_yaml_apply(project: Path) -> None:
    _setup(project)
    defs_yaml = _scaffold(project)
    _edit(defs_yaml, landing_root=str(project / "elsewhere"), agent="127.0.0.1:7999", curated_root="cur",
          partitions__start="2026-11-01-00:00", partitions__timezone="Europe/Paris", schedule__drain_cron="5 * * * *",
          pools__landing="one-lander", pools__curated="one-curator", sensor__interval_seconds=45)
    defs = _load(project)
    landed = defs.resolve_assets_def(landed_key("events"))
    curated = defs.resolve_assets_def(curated_key("events"))
    assert landed.op.pool == "one-lander" and curated.op.pool == "one-curator"
    partitions = curated.partitions_def
    assert isinstance(partitions, dg.TimeWindowPartitionsDefinition)
    assert partitions.timezone == "Europe/Paris" and partitions.get_first_partition_key() == "2026-11-01-00:00"
    schedule = defs.resolve_schedule_def("drain_schedule_events")
    assert (schedule.cron_schedule, schedule.execution_timezone) == ("5 * * * *", "Europe/Paris")
    assert defs.resolve_sensor_def("landing_sensor_events").minimum_interval_seconds == 45
    resources = defs.resources or {}
    assert resources["landing_events"].root == str(project / "elsewhere")
    assert resources["landing_events"].agent == "127.0.0.1:7999"
    assert resources["curated_events"].root == "cur"


def test_keys_left_out_come_from_the_dagster_table_then_the_defaults(project: Path) -> None:
    _setup(project)
    (project / "conf" / "dagster.toml").write_text('[dagster]\nsensor_min_backlog = 77\ndrain_cron = "0 * * * *"\n')
    component = IngestChannelComponent.from_attributes_dict(attributes={"channel": "events",
                                                                        "sensor": {"max_retries": 9}})
    settings = component.settings(project / "defs.yaml")
    assert (settings.sensor_min_backlog, settings.drain_cron, settings.sensor_max_retries) == (77, "0 * * * *", 9)
    assert settings.sensor_interval_seconds == 30  # the default
    assert settings.agent_conf == "conf/agent.toml"  # <conf dir>/agent.toml
    explicit = IngestChannelComponent.from_attributes_dict(attributes={"channel": "events",
                                                                       "sensor": {"min_backlog": 5}})
    assert explicit.settings(project / "defs.yaml").sensor_min_backlog == 5  # defs.yaml wins over the table


def _load_error(project: Path) -> ConfigError:
    with pytest.raises(Exception) as caught:
        _load(project)
    err: BaseException | None = caught.value
    while err is not None and not isinstance(err, ConfigError):
        err = err.__cause__ or err.__context__
    assert isinstance(err, ConfigError), caught.value
    return err


@pytest.mark.parametrize(("attribute", "value", "key"), [
    ("sensor__min_backlog", 0, "attributes.sensor.min_backlog"),
    ("partitions__start", "yesterday", "attributes.partitions.start"),
    ("partitions__timezone", "Mars/Olympus", "attributes.partitions.timezone"),
    ("checks__backlog_warn_fraction", 1.5, "attributes.checks.backlog_warn_fraction"),
    ("schedule__drain_cron", "every hour", "attributes.schedule.drain_cron"),
    ("channel", "clicks", "attributes.channel"),
    ("agent_conf", "conf/nowhere.toml", "attributes.agent_conf"),
])
def test_a_bad_value_stops_the_load_naming_the_file_and_the_key(project: Path, attribute: str, value: object,
                                                                 key: str) -> None:
    _setup(project)
    defs_yaml = _scaffold(project)
    _edit(defs_yaml, **{attribute: value})
    err = _load_error(project)
    assert err.key == key
    assert str(defs_yaml) in str(err) and key in str(err), str(err)
    assert "\n" not in str(err)


def test_a_channel_missing_from_the_agent_configuration_names_the_ones_there(project: Path) -> None:
    _setup(project)
    _edit(_scaffold(project, "clicks"), channel="clicks")
    assert "its channels: events" in str(_load_error(project))


def test_the_channel_directories_may_be_given_as_this_host_sees_them(project: Path) -> None:
    setup = _setup(project)
    mounted = project / "mnt"
    component = IngestChannelComponent.from_attributes_dict(attributes={
        "channel": "events", "agent_conf": str(setup.conf / "agent.toml"),
        "checkpoint_dir": str(mounted / "cp"), "data_dirs": [str(mounted / "d1")]})
    spec = component.channel_spec(component.settings(project / "defs.yaml"), project / "defs.yaml")
    assert spec.checkpoint_dir == str(mounted / "cp") and spec.data_dirs == (str(mounted / "d1"),)
    assert spec.settings["checkpoint_dir"] == str(mounted / "cp")
    assert spec.settings["data_dirs"] == [str(mounted / "d1")]
    assert spec.capacity == setup.spec.capacity


def test_the_repository_project_has_one_instance_per_channel_of_conf() -> None:
    with (REPO / "conf" / "agent.toml").open("rb") as f:
        channels = set(tomllib.load(f)["channels"])
    instances = {}
    for defs_yaml in (REPO / "dagster_defs" / "defs").glob("*/defs.yaml"):
        document = yaml.safe_load(defs_yaml.read_text())
        assert document["type"] == TYPE, defs_yaml
        instances[document["attributes"]["channel"]] = defs_yaml
    assert set(instances) == channels


def test_importing_the_code_location_reads_no_configuration(tmp_path: Path) -> None:
    """A configuration problem is an error of the code location's load, not of the import."""
    script = ("import dagster_defs.definitions as d\nprint('imported')\ntry:\n    d.defs()\nexcept Exception as err:\n"
              "    while err.__cause__ is not None: err = err.__cause__\n    print(type(err).__name__, err)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("INGEST_")}
    env["INGEST_CONF_DIR"] = str(tmp_path / "missing")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "imported"
    assert lines[1].startswith("ConfigError ") and "attributes.agent_conf" in lines[1], lines
    assert str(REPO / "dagster_defs" / "defs" / "events" / "defs.yaml") in lines[1]


@pytest.mark.integration
def test_dg_check_defs_names_the_file_and_the_key_of_a_bad_value(project: Path) -> None:
    """The user's view: ``dg check defs`` fails, naming the defs.yaml and the key, for a value of
    the wrong type (Dagster's schema check, with the line) and one out of range (ours)."""
    _setup(project)
    defs_yaml = _scaffold(project)
    dg_bin = str(Path(sys.executable).with_name("dg"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("INGEST_")}
    good = subprocess.run([dg_bin, "check", "defs"], cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert good.returncode == 0, good.stdout + good.stderr

    text = defs_yaml.read_text()
    defs_yaml.write_text(text.replace("min_backlog: 10000", "min_backlog: lots"))
    typed = subprocess.run([dg_bin, "check", "defs"], cwd=project, env=env, capture_output=True, text=True,
                           timeout=120)
    output = typed.stdout + typed.stderr
    assert typed.returncode != 0
    assert f"{defs_yaml}:" in output and "attributes.sensor" in output and "lots" in output, output

    defs_yaml.write_text(text.replace("min_backlog: 10000", "min_backlog: 0"))
    ranged = subprocess.run([dg_bin, "check", "defs"], cwd=project, env=env, capture_output=True, text=True,
                            timeout=120)
    output = ranged.stdout + ranged.stderr
    assert ranged.returncode != 0
    line = _line_of(defs_yaml, "min_backlog: 0")
    assert output.splitlines()[0] == (f"{defs_yaml}:{line} - {TYPE} attributes.sensor.min_backlog 0 is less than "
                                      "the minimum of 1"), output
    assert "Traceback" not in output and "Stack Trace" not in output


def _line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.mark.integration
def test_dg_check_defs_answers_a_bad_partitions_start_with_one_line_not_a_traceback(project: Path) -> None:
    """Issue 31, item 4: ``partitions: {start: yesterday}`` failed the load 55 lines deep, in
    ``strptime``. Now the schema dg checks first holds the key's pattern: the first line names the
    file, the line, the key and the forms it takes; under it dg shows the lines around it."""
    _setup(project)
    defs_yaml = _scaffold(project)
    text = defs_yaml.read_text()
    start = next(line for line in text.splitlines() if line.strip().startswith("start:"))
    defs_yaml.write_text(text.replace(start, "    start: yesterday"))
    dg_bin = str(Path(sys.executable).with_name("dg"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("INGEST_")}
    done = subprocess.run([dg_bin, "check", "defs"], cwd=project, env=env, capture_output=True, text=True,
                          timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 1
    assert output.splitlines()[0] == (
        f"{defs_yaml}:{_line_of(defs_yaml, 'start: yesterday')} - {TYPE} attributes.partitions.start 'yesterday' "
        "does not match '^(auto|[0-9]{4}-[0-9]{2}-[0-9]{2}-[0-9]{2}:[0-9]{2}|[{]{2}.*[}]{2})$'"), output
    assert "Traceback" not in output and "Stack Trace" not in output and len(output.splitlines()) < 15, output


@pytest.mark.parametrize("channel", ["events", "audit.log", "on", "2026", "with space"])
def test_the_scaffolded_file_reads_back_the_channel_name(channel: str) -> None:
    """YAML would read some names as other values (``on`` is true, ``2026`` a number) unless quoted."""
    from ingest_toolkit.dagster.component import defs_yaml

    attributes = yaml.safe_load(defs_yaml(TYPE, channel))["attributes"]
    assert attributes["channel"] == channel
    pools = attributes["pools"]
    assert (pools["landing"], pools["curated"]) == (f"landing-{channel}", f"curated-{channel}")


def test_every_attribute_is_described_for_the_docs_tab() -> None:
    """dg's schema (and the UI's Docs tab) show a description for each key, nested ones included."""
    model = IngestChannelComponent.get_model_cls()
    assert model is not None
    schema = model.model_json_schema()
    undocumented = [name for name, field in schema["properties"].items() if not field.get("description")]
    for definition, nested in schema.get("$defs", {}).items():
        if definition.endswith("Attributes"):
            undocumented += [f"{definition}.{name}" for name, field in nested["properties"].items()
                             if not field.get("description")]
    assert undocumented == []
    assert {"PartitionsAttributes", "SensorAttributes", "ChecksAttributes"} <= set(schema["$defs"])
