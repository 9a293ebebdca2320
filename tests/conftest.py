"""Shared test configuration."""

from __future__ import annotations

from hypothesis import settings

# Timing is measured by bench/, not by tests: a per-example deadline only makes property tests
# flaky on a loaded 2-core machine.
settings.register_profile("default", deadline=None)
settings.load_profile("default")
