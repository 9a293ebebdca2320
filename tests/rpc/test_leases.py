"""Leases: an idle remote take is rolled back; disconnect and SIGKILL roll back too."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

import pytest

from ingest_toolkit.channel import Event, TxnState
from ingest_toolkit.errors import TransactionError
from ingest_toolkit.rpc import AgentClient, AgentUnavailableError, LeaseExpiredError, RemoteTake
from tests.rpc.conftest import Agent, StartAgent, client_process


def evs(start: int, stop: int) -> list[Event]:
    return [Event(f"e{i:05d}".encode()) for i in range(start, stop)]


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> float:
    """Seconds until ``condition()`` held; fails after ``timeout``."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, "condition not reached in time"
        time.sleep(0.01)
    return time.monotonic() - start


def test_expired_lease_returns_events_to_the_head_in_order(agent: Agent, caplog: pytest.LogCaptureFixture) -> None:
    client = agent.client()
    client.put(evs(0, 10), channel="events")
    take = client.open_take("events", 4, lease_seconds=0.5)
    assert take.lease_seconds == 0.5
    client.put(evs(10, 12), channel="events")
    waited = wait_until(lambda: len(agent.channels["events"]) == 12)
    assert 0.3 < waited < 2.0, f"rolled back after {waited:.2f}s with a 0.5s lease"
    with pytest.raises(LeaseExpiredError, match="lease of 0.5s expired") as info:
        take.commit()
    assert isinstance(info.value, TransactionError) and info.value.events == 4
    assert take.state is TxnState.ROLLED_BACK
    with client.open_take("events", 100) as again:
        assert [e.body for e in again.events] == [e.body for e in evs(0, 12)]
    assert any("lease of 0.5s expired" in r.getMessage() for r in caplog.records)


def test_keep_alive_extends_the_lease(agent: Agent) -> None:
    client = agent.client()
    client.put(evs(0, 3), channel="events")
    take = client.open_take("events", 3, lease_seconds=0.4)
    for _ in range(5):  # 1.0 s of work, renewed every 0.2 s
        time.sleep(0.2)
        assert take.extend() == 0.4
    take.commit()
    assert take.state is TxnState.COMMITTED and len(agent.channels["events"]) == 0


def test_lease_is_capped_by_the_server(start_agent: StartAgent) -> None:
    agent = start_agent(default_lease=2.0)
    client = agent.client()
    with client.open_take("events", 1) as take:
        assert take.lease_seconds == 2.0  # asked for none: the default
    with client.open_take("events", 1, lease_seconds=10_000) as take:
        assert take.lease_seconds == 600  # the fixture's max_lease_seconds


def test_client_disconnect_rolls_back_at_once(agent: Agent) -> None:
    client = agent.client()
    client.put(evs(0, 5), channel="events")
    client.open_take("events", 5, lease_seconds=60)
    assert len(agent.channels["events"]) == 0
    client.close()  # lease far away: only the disconnect can bring them back
    assert wait_until(lambda: len(agent.channels["events"]) == 5) < 3.0
    assert wait_until(lambda: len(agent.service.leases) == 0) < 3.0


def test_closed_adapter_rolls_back_its_open_transactions(agent: Agent) -> None:
    client = agent.client()
    client.put(evs(0, 4), channel="events")
    channel = client.channel("events")
    tx = channel.transaction()
    assert len(tx.take(4)) == 4
    channel.close()
    assert wait_until(lambda: len(agent.channels["events"]) == 4) < 3.0
    assert client.status("events")["queue_size"] == 4  # the client itself still works


@pytest.mark.integration
def test_sigkilled_taker_gets_its_take_rolled_back(agent: Agent) -> None:
    client = agent.client()
    client.put(evs(0, 20), channel="events")
    with client_process("take_child.py", agent.server.address, "8", "0.5") as child:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("taken"), line
        taken = [int(s) for s in line.split()[1:]]
        assert len(taken) == 8 and len(agent.channels["events"]) == 12
        os.kill(child.pid, signal.SIGKILL)
        child.wait(5)
    wait_until(lambda: len(agent.channels["events"]) == 20, timeout=3.0)
    with client.open_take("events", 100) as again:
        assert [e.body for e in again.events] == [e.body for e in evs(0, 20)]
        assert [e.seq for e in again.events[:8]] == taken


def test_server_stop_rolls_back_open_transactions(agent: Agent) -> None:
    client = agent.client()
    client.put(evs(0, 6), channel="events")
    client.open_take("events", 6, lease_seconds=60)
    assert len(agent.channels["events"]) == 0
    agent.server.stop(grace=0.2)
    assert wait_until(lambda: len(agent.channels["events"]) == 6) < 3.0


def test_open_transactions_are_capped(start_agent: StartAgent) -> None:
    agent = start_agent()
    agent.service.max_open_transactions = 2
    client = agent.client()
    first, second = client.open_take("events", 1), client.open_take("events", 1)
    with pytest.raises(AgentUnavailableError, match="max_open_transactions"):
        client.open_take("events", 1)
    first.rollback()
    client.open_take("events", 1).rollback()  # a slot is free again
    second.rollback()


def test_concurrent_begins_never_exceed_the_cap(start_agent: StartAgent) -> None:
    """Many clients begin at once, many rounds: exactly ``max_open_transactions`` get a
    transaction each round (the check and the registration are one atomic step). A tiny GIL
    switch interval makes thread switches between a check and an add likely (the race this
    guards against showed up within a few rounds with it)."""
    cap, clients = 3, 24
    agent = start_agent(max_open_transactions=cap)
    client = agent.client()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(50):
            opened, refused = _race_begins(client, clients)
            assert (len(opened), len(refused)) == (cap, clients - cap)
            assert agent.service.leases.stats()["open"] == cap
            for take in opened:
                take.rollback()
            assert wait_until(lambda: agent.service.leases.stats()["open"] == 0) < 5
    finally:
        sys.setswitchinterval(interval)


def _race_begins(client: AgentClient, clients: int) -> tuple[list[RemoteTake], list[AgentUnavailableError]]:
    barrier = threading.Barrier(clients)
    opened: list[RemoteTake] = []
    refused: list[AgentUnavailableError] = []

    def begin() -> None:
        barrier.wait()
        try:
            opened.append(client.open_take("events", 1))
        except AgentUnavailableError as err:
            refused.append(err)

    threads = [threading.Thread(target=begin) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return opened, refused


def test_every_end_of_a_leased_take_is_logged_with_its_event_count(
        start_agent: StartAgent, caplog: pytest.LogCaptureFixture) -> None:
    """On-call follows the landing's batches in the agent log: one line per leased take that
    ends, committed or rolled back (INFO), expired (WARNING), with the number of events."""
    agent = start_agent(default_lease=30.0)
    client = agent.client()
    client.put(evs(0, 20), channel="events")
    with caplog.at_level(logging.INFO, logger="ingest_toolkit.rpc"):
        with client.open_take("events", 7):
            pass  # committed on exit
        client.open_take("events", 5).rollback()
        idle = client.open_take("events", 4, lease_seconds=0.3)  # held, never renewed
        wait_until(lambda: any(getattr(r, "outcome", None) == "expired" for r in caplog.records))
        assert idle.state is TxnState.OPEN  # the client has not heard yet
    ends = [(r.levelno, r.outcome, r.events, r.channel) for r in caplog.records  # type: ignore[attr-defined]
            if hasattr(r, "outcome")]
    assert ends == [(logging.INFO, "committed", 7, "events"), (logging.INFO, "rolled back", 5, "events"),
                    (logging.WARNING, "expired", 4, "events")], [r.getMessage() for r in caplog.records]
    assert "remote take committed: 7 events of channel events" in caplog.text
