"""The channel conformance suite against ``AgentClient.channel(name)``: a real agent on 127.0.0.1.

Every test of :class:`ChannelConformance` runs; the test's settings (capacity, keep_alive, ...)
are applied to the FileChannel the server hosts, and a reopen closes and reopens that channel on
the server while the client reconnects through a new adapter.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.channel.conformance import ChannelConformance, ChannelLike, OpenChannel
from tests.rpc.conftest import StartAgent


class TestRemoteChannel(ChannelConformance):
    @pytest.fixture
    def open_channel(self, start_agent: StartAgent) -> Iterator[OpenChannel]:
        agent = start_agent()
        client = agent.client()

        def open_channel(**settings: Any) -> ChannelLike:
            agent.reopen("events", **settings)
            adapter: ChannelLike = client.channel("events")
            return adapter

        yield open_channel
