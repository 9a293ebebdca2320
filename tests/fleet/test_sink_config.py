"""The sink and sink group settings are checked when the configuration loads; each problem names its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest_toolkit.collect.config import load_agent_config
from ingest_toolkit.errors import ConfigError

from .harness import FleetSetup, forward_sink

A = forward_sink("a", "127.0.0.1:1")
B = forward_sink("b", "127.0.0.1:2")


@pytest.mark.parametrize(("extra", "key", "message"), [
    (forward_sink("a", "127.0.0.1:1", channel="nope"), "sinks.a.channel", "unknown channel 'nope'"),
    ('[sinks.a]\ntype = "avro"\nchannel = "events"\naddress = "x:1"\n', "sinks.a.type", "unknown sink type"),
    (A + '[sink_groups.g]\nsinks = ["a", "zz"]\n', "sink_groups.g.sinks", "unknown sink 'zz'"),
    (A + B + '[sink_groups.g]\nsinks = ["a"]\n[sink_groups.h]\nsinks = ["a", "b"]\n', "sink_groups.h.sinks",
     "also in group g"),
    (A + B, "sinks.b.channel", "already emptied by sink group a"),
    (A + forward_sink("b", "127.0.0.1:2", batch_size=7) + '[sink_groups.g]\nsinks = ["a", "b"]\n',
     "sink_groups.g.sinks", "same channel, batch_size"),
    (A + forward_sink("b", "127.0.0.1:2", extra="pipeline = 3\n") + '[sink_groups.g]\nsinks = ["a", "b"]\n',
     "sink_groups.g.sinks", "pipeline"),
    (forward_sink("a", "127.0.0.1:1", extra="pipeline = 0\n"), "sinks.a.pipeline", "must be > 0"),
    (A + '[sink_groups.g]\nsinks = ["a"]\npriorities = { b = 1 }\n', "sink_groups.g", "not in this group"),
    (forward_sink("a", "127.0.0.1:1", extra='tls_cert = "c.pem"\n'), "sinks.a", "tls_cert and tls_key"),
    (forward_sink("a", "127.0.0.1:0"), "sinks.a.address", "a forward target needs a fixed address"),
    (forward_sink("a", "aggregator-1.example"), "sinks.a.address", "not host:port with a fixed port"),
    (A + '[sink_groups.g]\nsinks = ["a"]\nunreachable_after = 0\n', "sink_groups.g.unreachable_after",
     "greater than 0"),
])
def test_sink_settings_are_checked(tmp_path: Path, extra: str, key: str, message: str) -> None:
    setup = FleetSetup(tmp_path, extra=extra)
    with pytest.raises(ConfigError, match=message) as err:
        load_agent_config(setup.conf)
    assert key in str(err.value)


def test_a_sink_in_no_group_is_a_group_of_one(tmp_path: Path) -> None:
    from ingest_toolkit.collect.sinks import effective_groups

    config = load_agent_config(FleetSetup(tmp_path, extra=A).conf)
    groups = effective_groups(config.sinks, config.sink_groups)
    assert list(groups) == ["a"] and groups["a"].sinks == ["a"] and groups["a"].processor == "failover"
