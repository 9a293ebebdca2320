"""Fixtures of the channel tests."""

from __future__ import annotations

import os
import random

import pytest


@pytest.fixture
def crash_seed() -> int:
    """``CRASH_SEED`` from the environment (to repeat a crash test's random choices), else a random one."""
    return int(os.environ.get("CRASH_SEED", random.randrange(1 << 32)))
