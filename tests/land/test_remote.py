"""Landing through a real agent gRPC endpoint (127.0.0.1, ephemeral port): leased remote takes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.errors import ConfigError
from ingest_toolkit.land import LandingError, LandingResult, land_once, read_manifests
from ingest_toolkit.land.config import agent_client
from ingest_toolkit.land.errors import CommitConflict
from ingest_toolkit.rpc.client import AgentClient, RemoteSource
from ingest_toolkit.rpc.server import start_server
from ingest_toolkit.rpc.service import AgentService
from ingest_toolkit.security import TlsSettings
from tests.certs import client_cert, self_signed

from .helpers import assert_landed_exactly_once, channel_settings, landing_config, make_events, put_events, read_landed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


def _no_puts(*_: Any) -> Any:
    raise AssertionError("this test puts in-process")


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[FileChannel, AgentClient]]:
    ch = FileChannel(**channel_settings(tmp_path, transaction_capacity=400))
    server = start_server(AgentService({"events": ch}, _no_puts, default_lease_seconds=60.0, max_lease_seconds=600.0))
    client = AgentClient(server.address)
    try:
        yield ch, client
    finally:
        client.close()
        server.stop(grace=1.0)
        ch.close()


def test_lands_through_the_agent_exactly_once(tmp_path: Path, agent: tuple[FileChannel, AgentClient],
                                              spark: SparkSession) -> None:
    ch, client = agent
    expected = put_events(ch, make_events(1000), batch=400)
    source = RemoteSource(client, "events", lease_seconds=120.0)
    config = landing_config(tmp_path / "landing", max_events=100_000)  # above transaction_capacity: capped to 400
    results = [land_once(source, config, spark) for _ in range(3)]
    assert [r.events for r in results] == [400, 400, 200] and results[-1].backlog_after == 0
    assert len(ch) == 0 and client.status("events")["queue_size"] == 0
    assert_landed_exactly_once(read_landed(tmp_path / "landing", "events"), expected, ch.channel_id)


def test_a_failed_remote_landing_rolls_the_take_back(tmp_path: Path, agent: tuple[FileChannel, AgentClient],
                                                     spark: SparkSession) -> None:
    ch, client = agent
    expected = put_events(ch, make_events(120))
    (tmp_path / "blocker").write_text("not a directory")
    with pytest.raises(LandingError) as err:
        land_once(RemoteSource(client, "events", 60.0), landing_config(tmp_path / "blocker" / "root"), spark)
    assert err.value.rolled_back and len(ch) == 120
    result = land_once(RemoteSource(client, "events", 60.0), landing_config(tmp_path / "landing"), spark)
    assert result.events == 120
    assert_landed_exactly_once(read_landed(tmp_path / "landing", "events"), expected, ch.channel_id)


class _SlowWrite:
    """A write lock that holds the Spark write back for ``seconds``: a write longer than the lease."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __enter__(self) -> None:
        time.sleep(self.seconds)

    def __exit__(self, *exc: object) -> None:
        return None


class _UntilRolledBack:
    """A write lock that holds the Spark write back until the agent has rolled the take back
    (its lease ran out): the channel holds every event again."""

    def __init__(self, ch: FileChannel, events: int) -> None:
        self.ch, self.events = ch, events

    def __enter__(self) -> None:
        deadline = time.monotonic() + 30
        while len(self.ch) < self.events:
            assert time.monotonic() < deadline, "the agent never rolled the take back"
            time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize("renew", [True, False])
def test_a_write_longer_than_the_lease_keeps_its_take_while_renewing(
        tmp_path: Path, agent: tuple[FileChannel, AgentClient], spark: SparkSession, renew: bool) -> None:
    # The lease leaves room for the take itself on a loaded machine; the write outlasts it
    # (renewing) or waits until the agent rolled it back (not renewing): no race on timing.
    ch, client = agent
    expected = put_events(ch, make_events(200))
    source = RemoteSource(client, "events", lease_seconds=1.5)
    config = landing_config(tmp_path / "landing", lease_renewal_max_seconds=60.0 if renew else 0.0)
    if renew:
        result = land_once(source, config, spark, write_lock=_SlowWrite(4.0))
        assert result.events == 200 and len(ch) == 0
    else:  # the agent rolled the take back mid-write: the run finds out before its manifest, publishes nothing
        with pytest.raises(LandingError, match="lease") as err:
            land_once(source, config, spark, write_lock=_UntilRolledBack(ch, 200))
        assert err.value.phase == "confirming the take's lease" and len(ch) == 200
        assert not (tmp_path / "landing" / "events" / "_manifests").exists()
        retry = land_once(source, config, spark)
        assert retry.events == 200 and retry.redelivered == 0 and len(ch) == 0
    assert_landed_exactly_once(read_landed(tmp_path / "landing", "events"), expected, ch.channel_id)


class _HoldUntil:
    """A write lock that holds the Spark write back until ``release`` is set."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def __enter__(self) -> None:
        self.entered.set()
        assert self.release.wait(60), "the test never released the write"

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize("lease_check", [True, False])
def test_a_take_whose_lease_ran_out_mid_write_is_never_landed_twice(
        tmp_path: Path, agent: tuple[FileChannel, AgentClient], spark: SparkSession,
        monkeypatch: pytest.MonkeyPatch, lease_check: bool) -> None:
    """Landing A's lease runs out while its write is held back; landing B takes the same events
    and lands them; then A writes. Either A's lease check stops it before its manifest, or (check
    switched off) the manifest commit log refuses A's overlapping commit."""
    if not lease_check:
        monkeypatch.setattr("ingest_toolkit.land.landing._confirm_lease", lambda take: None)
    ch, client = agent
    expected = put_events(ch, make_events(200))
    root = tmp_path / "landing"
    config = landing_config(root, lease_renewal_max_seconds=0.0)
    hold, outcome = _HoldUntil(), dict[str, LandingResult | LandingError]()

    def landing_a() -> None:
        try:
            outcome["a"] = land_once(RemoteSource(client, "events", lease_seconds=0.5), config, spark, write_lock=hold)
        except LandingError as err:
            outcome["a"] = err

    thread = threading.Thread(target=landing_a)
    thread.start()
    assert hold.entered.wait(60)
    deadline = time.monotonic() + 20
    while len(ch) < 200:  # the agent rolls A's take back when its lease runs out
        assert time.monotonic() < deadline, "the lease never ran out"
        time.sleep(0.05)
    b = land_once(RemoteSource(client, "events", lease_seconds=60.0), config, spark)
    assert b.events == 200 and len(ch) == 0
    hold.release.set()
    thread.join(120)
    a = outcome["a"]
    assert isinstance(a, LandingError)
    if lease_check:
        assert a.phase == "confirming the take's lease"
    else:
        assert isinstance(a, CommitConflict) and a.phase == "committing the manifest"
    assert [m.count for m in read_manifests(str(root), "events")] == [200]
    assert not list((root / "events" / "_staging").iterdir()) or lease_check  # a conflict cleans up at once
    assert_landed_exactly_once(read_landed(root, "events"), expected, ch.channel_id)


def test_lands_through_an_agent_with_mutual_tls_and_a_token(tmp_path: Path, spark: SparkSession,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    server_cert, server_key = self_signed(tmp_path / "server")
    client_ca, client_ca_key = self_signed(tmp_path / "client-ca", name="client CA")
    cert, key = client_cert(tmp_path / "client", client_ca, client_ca_key)
    ch = FileChannel(**channel_settings(tmp_path))
    service = AgentService({"events": ch}, _no_puts, token="landing-token", default_lease_seconds=60.0,
                           max_lease_seconds=600.0)
    tls = TlsSettings(cert_file=server_cert, key_file=server_key, client_ca_file=client_ca)
    server = start_server(service, "127.0.0.1", 0, tls=tls)
    try:
        expected = put_events(ch, make_events(300))
        monkeypatch.setenv("LANDING_TOKEN", "landing-token")
        root = tmp_path / "landing"
        config = landing_config(root, agent=server.address, agent_token_env="LANDING_TOKEN",
                                agent_tls_ca=str(server_cert), agent_tls_cert=str(cert), agent_tls_key=str(key))
        anonymous = config.model_copy(update={"agent_tls_cert": None, "agent_tls_key": None})
        with agent_client(anonymous) as client, pytest.raises(LandingError) as err:
            land_once(RemoteSource(client, "events", 60.0), anonymous, spark)
        assert err.value.phase == "taking events" and len(ch) == 300  # refused: no client certificate
        with agent_client(config) as client:
            result = land_once(RemoteSource(client, "events", 60.0), config, spark)
        assert result.events == 300 and len(ch) == 0
        assert_landed_exactly_once(read_landed(root, "events"), expected, ch.channel_id)
        monkeypatch.delenv("LANDING_TOKEN")
        with pytest.raises(ConfigError, match="LANDING_TOKEN, which is not set"):
            agent_client(config)
    finally:
        server.stop(grace=1.0)
        ch.close()
