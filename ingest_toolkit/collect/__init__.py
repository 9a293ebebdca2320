"""Collectors: sources -> interceptors -> channel selector -> file channels.

See docs/collectors.md. The put path is :class:`~ingest_toolkit.collect.pipeline.Pipeline`;
sources live in :mod:`ingest_toolkit.collect.sources`.
"""

from __future__ import annotations

from .interceptors import Interceptor, InterceptorSettings, build_interceptors
from .pipeline import Pipeline, PutResult
from .selectors import Selector, SelectorSettings, build_selector

__all__ = ["Interceptor", "InterceptorSettings", "Pipeline", "PutResult", "Selector", "SelectorSettings",
           "build_interceptors", "build_selector"]
