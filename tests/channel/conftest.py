"""Fixtures of the channel tests."""

from __future__ import annotations

import os
import random

import pytest


@pytest.fixture
def crash_seed() -> int:
    """``CRASH_SEED`` from the environment (to repeat a crash test's random choices), else a random one."""
    return int(os.environ.get("CRASH_SEED", random.randrange(1 << 32)))


@pytest.fixture(params=["plain", "aes256gcm"])
def cipher(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test in clear and again with encryption at rest (tests/channel/encryption.py)."""
    from .encryption import KEY_1, KEY_2, KEYS_ENV

    if request.param == "plain":
        monkeypatch.delenv(KEYS_ENV, raising=False)
    else:
        monkeypatch.setenv(KEYS_ENV, f"1:{KEY_1},2:{KEY_2}")
    return str(request.param)


@pytest.fixture
def encrypted_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the test with encryption at rest on only."""
    from .encryption import KEY_1, KEY_2, KEYS_ENV

    monkeypatch.setenv(KEYS_ENV, f"1:{KEY_1},2:{KEY_2}")
