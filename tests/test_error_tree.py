"""One error tree: every exception class of the toolkit derives from IngestError (but the three
documented signals), and the root module's docstring draws every one of them."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import dagster_defs
import ingest_toolkit
from ingest_toolkit import errors
from ingest_toolkit.errors import IngestError

# Never reach a caller: each is turned into a toolkit error (or ends a loop) where it is raised.
SIGNALS = {"ingest_toolkit.channel.format.FrameError", "ingest_toolkit.collect.sources.base.SourceStopped",
           "ingest_toolkit.rpc.ordered.ItemFailed"}


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for package in (ingest_toolkit, dagster_defs):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for name, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, BaseException) and cls.__module__ == module.__name__ and not name.startswith("_"):
                    found[f"{module.__name__}.{name}"] = cls
    return found


def test_every_error_of_the_toolkit_derives_from_ingest_error() -> None:
    classes = _exception_classes()
    assert len(classes) > 30, "the walk found too few classes to mean anything"
    outside = sorted(name for name, cls in classes.items() if not issubclass(cls, IngestError))
    assert outside == sorted(SIGNALS), f"errors outside the IngestError tree: {sorted(set(outside) - SIGNALS)}"


def test_the_root_docstring_draws_every_error() -> None:
    doc = errors.__doc__ or ""
    missing = sorted(name for name in _exception_classes() if name.rsplit(".", 1)[1] not in doc)
    assert not missing, f"ingest_toolkit/errors.py's docstring does not draw {missing}"
