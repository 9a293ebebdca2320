"""Every test in tests/fuzz is a fuzz target (marker ``fuzz``); see harness.py for the oracle
and for how to run the targets longer than the suite does."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/fuzz/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.fuzz)
