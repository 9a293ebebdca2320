"""Running channel tests with encryption at rest on.

``KEYS_ENV`` holds test keys while a test runs encrypted (the ``cipher`` fixture of
``conftest.py`` sets it); :func:`with_encryption` adds the encryption settings to a channel's
settings then, and leaves them alone otherwise. Child processes inherit the variable, so a
crash child and the parent that checks its work open the channel alike.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["KEY_1", "KEY_2", "KEYS_ENV", "encrypted", "with_encryption"]

KEYS_ENV = "ITK_TEST_CHANNEL_KEYS"
KEY_1 = bytes(range(32)).hex()
KEY_2 = bytes(range(100, 132)).hex()


def encrypted() -> bool:
    return KEYS_ENV in os.environ


def with_encryption(settings: dict[str, Any], key_id: int = 1) -> dict[str, Any]:
    """``settings`` plus the encryption settings when the test runs encrypted."""
    if not encrypted():
        return settings
    return {**settings, "encryption_key_env": KEYS_ENV, "encryption_key_id": key_id}
