"""No agent process outlives its test (the fleet tests start several per test)."""

from __future__ import annotations

from ..agent.conftest import _kill_leftover_children  # noqa: F401  (an autouse fixture)
