"""The collect stage keeps its errors in one module, all under IngestError."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import ingest_toolkit.collect
from ingest_toolkit.collect import errors
from ingest_toolkit.errors import ChannelLockedError, IngestError


def _collect_modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(ingest_toolkit.collect.__path__, "ingest_toolkit.collect.")]


def test_every_error_of_the_collect_stage_is_defined_in_its_errors_module() -> None:
    defined_elsewhere = set()
    for name in _collect_modules():
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == name and name != errors.__name__:
                defined_elsewhere.add(f"{name}.{cls.__qualname__}")
    # control flow inside one request or one worker, never raised to a caller
    assert defined_elsewhere == {"ingest_toolkit.collect.sources.base.SourceStopped",
                                 "ingest_toolkit.collect.sources.http._Reply"}
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), IngestError), name


def test_agent_locked_error_is_a_channel_locked_error_built_by_its_parent() -> None:
    err = errors.AgentLockedError(path="/srv/agent/state", holder="pid 4242")
    assert isinstance(err, ChannelLockedError)
    assert (err.path, err.holder) == ("/srv/agent/state", "pid 4242")
    assert str(err) == ("agent state directory /srv/agent/state is in use by another agent (pid 4242); stop it, "
                        "or give this agent its own [agent] state_dir")
