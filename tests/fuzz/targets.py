"""The fuzz targets of tests/fuzz as plain callables, for runs outside pytest (``long_run.py``).

A target is a ``@given`` test of a ``tests/fuzz/test_*.py`` module (the oracle's own tests in
``test_harness.py`` aside), once per combination of its ``parametrize`` marks, as pytest runs it.
Hypothesis drives it from a buffer of bytes: :meth:`Target.fuzz_one_input` is the handle's
``fuzz_one_input`` (the entry point hypothesis documents for external fuzzers), with the test's
fixtures and parameters bound through ``HypothesisHandle.inner_test`` (which hypothesis lets
callers wrap). The fixtures come from :class:`Fixtures`, built once per process from the same
functions the pytest fixtures call (``channel_seeds.py``); ``workdir`` is emptied after every
execution, so a long run does not fill the disk.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import os
import pkgutil
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from .channel_seeds import KEYS, KEYS_ENV, encrypted_seed_channel, reader_seeds, seed_channel

__all__ = ["Fixtures", "Target", "discover"]

PACKAGE = "tests.fuzz"
SKIPPED_MODULES = frozenset({"test_harness"})  # the oracle's own tests, not targets of the toolkit


class Fixtures:
    """The fixtures the targets ask for, built on first use under a temporary directory."""

    def __init__(self) -> None:
        self._root = Path(tempfile.mkdtemp(prefix="fuzz-long-run-"))
        self._values: dict[str, Any] = {}
        self.workdir = self._root / "work"
        self.workdir.mkdir()
        self._makers: dict[str, Callable[[], Any]] = {
            "channel_files": lambda: seed_channel(self._root / "readers"),
            "seeds": lambda: reader_seeds(self.get("channel_files")),
            "encrypted_files": self._encrypted,
            "sealed_runs": self._sealed_runs,
            "workdir": lambda: self.workdir,
        }

    def get(self, name: str) -> Any:
        if name not in self._makers:
            raise KeyError(f"fixture {name!r} is not provided outside pytest: add it to targets.Fixtures")
        if name not in self._values:
            self._values[name] = self._makers[name]()
        return self._values[name]

    def _encrypted(self) -> Any:
        os.environ[KEYS_ENV] = KEYS  # for as long as the process runs: the encrypted targets read it
        return encrypted_seed_channel(self._root / "encrypted")

    def _sealed_runs(self) -> Any:
        from .test_sealed_run_moves import sealed_seed

        os.environ[KEYS_ENV] = KEYS
        return sealed_seed(self._root / "sealed-runs")

    def clean(self) -> None:
        """Empty ``workdir`` (each example makes its directories there)."""
        for entry in os.scandir(self.workdir):
            shutil.rmtree(entry.path, ignore_errors=True) if entry.is_dir() else os.unlink(entry.path)

    def close(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)


@dataclass
class Target:
    """One fuzz target: a ``@given`` test with fixed parameters."""

    name: str  # module::function[params], as pytest names it
    test: Any  # the @given test function
    params: dict[str, Any] = field(default_factory=dict)
    last_input: dict[str, Any] = field(default_factory=dict)  # what the current execution drew

    @property
    def fixture_names(self) -> list[str]:
        """The test's arguments that neither @given nor parametrize supply."""
        return [p for p in inspect.signature(self.test).parameters if p not in self.params]

    def fuzz_one_input(self, fixtures: Fixtures) -> Callable[[bytes], bytes | None]:
        """Hypothesis's ``fuzz_one_input`` of the test, fixtures and parameters bound; the drawn
        input of each execution is kept in :attr:`last_input` (draws of ``st.data()`` included)."""
        handle = self.test.hypothesis
        inner = getattr(handle, "_long_run_original", handle.inner_test)
        handle._long_run_original = inner
        bound = {name: fixtures.get(name) for name in self.fixture_names} | self.params

        def run(*args: Any, **drawn: Any) -> Any:
            self.last_input.clear()
            self.last_input.update(drawn)
            for name, value in drawn.items():
                if isinstance(value, st.DataObject):
                    _record_draws(value, self.last_input, name)
            return inner(*args, **bound, **drawn)

        handle.inner_test = run
        # fuzz_one_input binds no argument to the test: its fixtures and parameters are made
        # optional in the signature it checks (``run`` passes them), as a test of @given alone.
        signature = inspect.signature(self.test)
        self.test.__signature__ = signature.replace(
            parameters=[p.replace(default=None) for p in signature.parameters.values()])
        return handle.fuzz_one_input  # type: ignore[no-any-return]


def _record_draws(data: st.DataObject, into: dict[str, Any], name: str) -> None:
    draw = data.draw

    def recording(strategy: Any, label: Any = None) -> Any:
        value = draw(strategy, label)
        into[f"{name}.draw({label or len(into)})"] = value
        return value

    data.draw = recording  # type: ignore[method-assign]


def _parameter_sets(test: Any) -> Iterator[dict[str, Any]]:
    """Every combination of the test's ``parametrize`` marks (one empty set without any)."""
    axes: list[list[dict[str, Any]]] = []
    for mark in getattr(test, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names = [n.strip() for n in mark.args[0].split(",")] if isinstance(mark.args[0], str) else list(mark.args[0])
        values = [v if len(names) > 1 else (v,) for v in mark.args[1]]
        axes.append([dict(zip(names, v, strict=True)) for v in values])
    for combination in itertools.product(*axes):
        yield {k: v for part in combination for k, v in part.items()}


def discover(pattern: str = "") -> list[Target]:
    """Every fuzz target of tests/fuzz whose name contains ``pattern``, in module order."""
    package = importlib.import_module(PACKAGE)
    targets: list[Target] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if not info.name.startswith("test_") or info.name in SKIPPED_MODULES:
            continue
        module = importlib.import_module(f"{PACKAGE}.{info.name}")
        for attr, test in vars(module).items():
            if attr.startswith("test_") and getattr(test, "is_hypothesis_test", False):
                for params in _parameter_sets(test):
                    suffix = f"[{'-'.join(map(str, params.values()))}]" if params else ""
                    name = f"{info.name}::{attr}{suffix}"
                    if pattern in name:
                        targets.append(Target(name, test, params))
    return targets
