"""What feeds buffers to a fuzz target in a long run (``long_run.py``): libFuzzer through atheris
(coverage-guided) when it is installed, else random buffers and mutations of the buffers that
made valid examples.

Each engine calls ``fuzz`` (a target's ``fuzz_one_input``) until its time or execution budget
is spent or a call raises, and returns a :class:`Tally`; ``after`` runs after every call (the
long run empties the work directory there).
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["Failure", "Tally", "load_corpus", "run_atheris", "run_random", "save_corpus"]

Fuzz = Callable[[bytes], bytes | None]


@dataclass
class Failure:
    """The first oracle failure of a target: the buffer (saved to ``path``) and what it raised."""

    error: str
    input: str  # the drawn arguments, as text
    path: str


@dataclass
class Tally:
    """Executions of one target: all calls, and those that ran the test (a buffer too short for
    the test's draws, or filtered out, ends before it)."""

    executions: int = 0
    valid: int = 0
    seconds: float = 0.0
    failure: Failure | None = None
    engine: str = "random"
    extra: dict[str, str] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> Tally:
        raw = json.loads(path.read_text())
        failure = raw.pop("failure")
        return cls(**raw, failure=Failure(**failure) if failure else None)


# -- random buffers and mutations ----------------------------------------------------------------
_CORPUS = 512  # valid buffers kept to mutate


def _mutate(rnd: random.Random, corpus: list[bytes]) -> bytes:
    """A fresh random buffer (a third of the time, or with nothing to mutate), else a kept one
    with a few bytes flipped, replaced, inserted, deleted, or spliced with another."""
    if not corpus or rnd.random() < 1 / 3:
        return rnd.randbytes(rnd.choice([16, 64, 256, 1024, 4096]))
    data = bytearray(rnd.choice(corpus))
    for _ in range(rnd.randint(1, 4)):
        at = rnd.randrange(len(data) + 1)
        kind = rnd.randrange(5)
        if kind == 0 and at < len(data):
            data[at] ^= 1 << rnd.randrange(8)
        elif kind == 1 and at < len(data):
            data[at] = rnd.randrange(256)
        elif kind == 2:
            data[at:at] = rnd.randbytes(rnd.randint(1, 16))
        elif kind == 3:
            del data[at:at + rnd.randint(1, 16)]
        else:
            other = rnd.choice(corpus)
            data[at:] = other[rnd.randrange(len(other) + 1):]
    return bytes(data) + rnd.randbytes(64)  # room for draws past the original's end


def load_corpus(directory: Path | None) -> list[bytes]:
    """The buffers a previous run kept in ``directory`` (none when it is None or empty)."""
    if directory is None or not directory.is_dir():
        return []
    return [path.read_bytes() for path in sorted(directory.iterdir()) if path.is_file()][-_CORPUS:]


def save_corpus(directory: Path, corpus: list[bytes]) -> int:
    """Keep ``corpus`` in ``directory`` for the next run, one file per buffer named by its hash
    (a buffer kept before is not written twice); the number of new files."""
    directory.mkdir(parents=True, exist_ok=True)
    written = 0
    for buffer in corpus:
        path = directory / hashlib.sha1(buffer).hexdigest()
        if not path.exists():
            path.write_bytes(buffer)
            written += 1
    return written


def run_random(fuzz: Fuzz, after: Callable[[], None], seconds: float, executions: int, seed: int,
               on_failure: Callable[[bytes, BaseException], Failure], corpus_dir: Path | None = None) -> Tally:
    """Drive ``fuzz`` with random and mutated buffers until ``seconds`` or ``executions`` is spent
    (0: no limit of that kind) or a call fails. With ``corpus_dir``, the buffers kept there by an
    earlier run are mutated from the start, and the kept buffers are saved there at the end."""
    rnd, corpus, tally = random.Random(seed), load_corpus(corpus_dir), Tally()
    if corpus:
        tally.extra["corpus_loaded"] = str(len(corpus))
    start = time.perf_counter()
    deadline = start + seconds if seconds else float("inf")
    while (not executions or tally.executions < executions) and time.perf_counter() < deadline:
        buffer = _mutate(rnd, corpus)
        tally.executions += 1
        try:
            kept = fuzz(buffer)
        except BaseException as err:  # noqa: BLE001 - the oracle's failure, reported with its input
            tally.failure = on_failure(buffer, err)
            break
        finally:
            after()
        if kept is not None:
            tally.valid += 1
            if len(corpus) < _CORPUS:
                corpus.append(kept)
            else:
                corpus[rnd.randrange(_CORPUS)] = kept
    tally.seconds = time.perf_counter() - start
    if corpus_dir is not None:
        tally.extra["corpus_saved"] = str(save_corpus(corpus_dir, corpus))
    return tally


# -- libFuzzer (atheris) ---------------------------------------------------------------------------
def run_atheris(fuzz: Fuzz, after: Callable[[], None], seconds: float, executions: int, seed: int,
                on_failure: Callable[[bytes, BaseException], Failure], result: Path, artifacts: Path,
                corpus_dir: Path | None = None) -> None:
    """Drive ``fuzz`` with libFuzzer; never returns (libFuzzer exits the process). The tally is
    written to ``result`` every second and when the budget is spent or a call fails; libFuzzer
    writes what it finds itself (a crash, a timeout) under ``artifacts``. With ``corpus_dir``,
    libFuzzer starts from the inputs kept there and adds each input of new coverage to it."""
    import atheris  # the optional fuzzer: only when asked for

    tally, start = Tally(engine="atheris"), time.perf_counter()
    saved = [start]

    def one_input(buffer: bytes) -> None:
        tally.executions += 1
        try:
            if fuzz(buffer) is not None:
                tally.valid += 1
        except BaseException as err:  # noqa: BLE001 - report, then let libFuzzer stop
            tally.failure = on_failure(buffer, err)
            _save(tally, start, result)
            raise
        finally:
            after()
        now = time.perf_counter()
        if now - saved[0] >= 1.0 or (executions and tally.executions >= executions):
            saved[0] = now
            _save(tally, start, result)

    # -timeout: a hang outside the oracle's own limit (2 s per call); atheris counts 0 as 0 s.
    args = [sys.argv[0], f"-seed={seed or 1}", "-timeout=60", "-rss_limit_mb=4096", "-max_len=8192",
            "-print_final_stats=1", f"-artifact_prefix={artifacts}/"]
    args += [f"-max_total_time={max(1, int(seconds))}"] if seconds else []
    args += [f"-runs={executions}"] if executions else []
    if corpus_dir is not None:
        corpus_dir.mkdir(parents=True, exist_ok=True)
        args.append(str(corpus_dir))  # libFuzzer's first corpus directory: read at start, written to
    atheris.Setup(args, one_input)
    try:
        atheris.Fuzz()
    finally:
        _save(tally, start, result)


def _save(tally: Tally, start: float, result: Path) -> None:
    tally.seconds = time.perf_counter() - start
    tally.save(result)
