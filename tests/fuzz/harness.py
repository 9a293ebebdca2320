"""The fuzz oracle shared by every target in this directory.

A target feeds one input to one reader or parser of the toolkit. The oracle accepts exactly two
outcomes: the call returns, or it raises one of the toolkit's own errors (:class:`IngestError`
or a subclass the target names). Anything else fails the example:

- another exception (``struct.error``, ``DecodeError``, ``RecursionError``, ``MemoryError``...);
- a call that runs longer than ``max_seconds`` (a hang, or work quadratic in the input);
- a call whose Python allocations peak above ``max_alloc_bytes`` (a length field believed
  before it was verified).

Inputs come from :func:`mutated`: real bytes the project wrote (segments, checkpoints, request
bodies), then damaged the way disks and clients damage them: bit flips, overwritten bytes,
truncation, insertion, a duplicated or deleted span.

How long the targets run: ``INGEST_FUZZ_EXAMPLES`` examples per target (default 150, what the
test suite runs, derandomized so CI is repeatable). For a longer, random run::

    INGEST_FUZZ_EXAMPLES=20000 INGEST_FUZZ_RANDOM=1 python -m pytest tests/fuzz -m fuzz -q
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from ingest_toolkit.errors import IngestError

EXAMPLES = int(os.environ.get("INGEST_FUZZ_EXAMPLES", "150"))
RANDOM = os.environ.get("INGEST_FUZZ_RANDOM", "") not in ("", "0")

#: Hypothesis settings every target uses: examples from the environment, no per-example
#: deadline (the oracle times each call itself), no example database in the repository.
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not RANDOM,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                           HealthCheck.function_scoped_fixture],
)


class OracleFailure(AssertionError):
    """The call did something the oracle forbids; the message says what."""


class _Timeout(BaseException):
    """Raised by SIGALRM inside the call; a BaseException so ``except Exception`` in the code
    under test cannot swallow it."""


@dataclass
class Outcome:
    value: Any = None
    error: IngestError | None = None
    seconds: float = 0.0
    peak_bytes: int = 0


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    def _fire(signum: int, frame: object) -> None:
        raise _Timeout()

    previous = signal.signal(signal.SIGALRM, _fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_call(fn: Callable[[], Any], *, allowed: tuple[type[BaseException], ...] = (IngestError,),
               max_seconds: float = 2.0, max_alloc_bytes: int = 64 << 20) -> Outcome:
    """Run ``fn()`` under the oracle; return what it returned or the allowed error it raised.

    Must run on the main thread (it uses SIGALRM). Allocations are measured by ``tracemalloc``,
    which sees every Python object, ``bytes`` buffers included."""
    outcome = Outcome()
    started_tracing = not tracemalloc.is_tracing()
    if started_tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    start = time.perf_counter()
    try:
        with _alarm(max_seconds):
            outcome.value = fn()
    except _Timeout:
        raise OracleFailure(f"the call ran longer than {max_seconds} s "
                            "(a hang, or work superlinear in the input)") from None
    except allowed as err:  # the project's own error: the contract holds
        outcome.error = err  # type: ignore[assignment]
    except BaseException as err:  # noqa: BLE001 - anything else is the defect we hunt
        raise OracleFailure(f"foreign exception {type(err).__module__}.{type(err).__qualname__}: {err}") from err
    finally:
        outcome.seconds = time.perf_counter() - start
        outcome.peak_bytes = max(0, tracemalloc.get_traced_memory()[1] - base)
        if started_tracing:
            tracemalloc.stop()
    if outcome.peak_bytes > max_alloc_bytes:
        raise OracleFailure(f"the call allocated {outcome.peak_bytes} bytes at its peak, above {max_alloc_bytes}: "
                            "a length believed before it was verified?")
    return outcome


# --- inputs ---------------------------------------------------------------------------------------

def bit_flips(record: bytes) -> Iterator[tuple[int, bytes]]:
    """Every single-bit flip of ``record``: (bit index, flipped bytes)."""
    for bit in range(len(record) * 8):
        flipped = bytearray(record)
        flipped[bit // 8] ^= 1 << (bit % 8)
        yield bit, bytes(flipped)


@st.composite
def _mutation(draw: st.DrawFn, seed: bytes) -> bytes:
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete", "duplicate", "extreme"]))
        size = len(data)
        if kind == "truncate":
            del data[draw(st.integers(0, size)):]
            continue
        if kind == "insert":
            at = draw(st.integers(0, size))
            data[at:at] = draw(st.binary(min_size=1, max_size=32))
            continue
        if size == 0:
            continue
        at = draw(st.integers(0, size - 1))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            data[at] = draw(st.integers(0, 255))
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 16))]
        elif kind == "duplicate":
            span = bytes(data[at:at + draw(st.integers(1, 64))])
            data[at:at] = span
        else:  # extreme: a 4- or 8-byte field overwritten with a boundary value
            width = draw(st.sampled_from([4, 8]))
            value = draw(st.sampled_from([0, 1, 0x7F, 0xFF, 2**31 - 1, 2**31, 2**32 - 1, 2**63 - 1, 2**64 - 1]))
            value &= (1 << (8 * width)) - 1
            data[at:at + width] = value.to_bytes(width, "big")
    return bytes(data)


def mutated(seeds: Sequence[bytes]) -> st.SearchStrategy[bytes]:
    """Real inputs, damaged: one of ``seeds`` with one to four mutations applied."""
    if not seeds:
        raise ValueError("mutated() needs at least one seed")
    return st.sampled_from(list(seeds)).flatmap(_mutation)
