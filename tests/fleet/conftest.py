"""No agent process outlives its test (the fleet tests start several per test); an aggregator
agent in this process for the forward sink's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..agent.conftest import _kill_leftover_children  # noqa: F401  (an autouse fixture)
from .harness import FleetSetup, free_port, in_process


@pytest.fixture
def aggregator(tmp_path: Path) -> Iterator[tuple[FleetSetup, Any]]:
    """``(setup, agent)``: an aggregator agent started in this process on a free gRPC port."""
    setup = FleetSetup(tmp_path / "agg", name="agg", grpc_port=free_port())
    agent = in_process(setup)
    yield setup, agent
    agent.stop()
