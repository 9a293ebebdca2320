"""Long runs of every fuzz target (issue 28): each ``@given`` target of tests/fuzz driven through
hypothesis's ``fuzz_one_input``, under the same oracle as in the test suite.

    python -m tests.fuzz.long_run --seconds 3600            # every target, the time split evenly
    python -m tests.fuzz.long_run --executions 100000 -k decoder
    python -m tests.fuzz.long_run --list                    # the targets and their fixtures
    python -m tests.fuzz.long_run --replay FILE -k NAME     # one saved failing input, again
    python -m tests.fuzz.long_run --seconds 3600 --corpus DIR   # in parts: each from the inputs the last kept

Run from the repository root. Each target runs in a process of its own (``--jobs`` at a time),
with atheris (libFuzzer, coverage-guided over ``ingest_toolkit``) when it is installed
(``pip install atheris``), else with random buffers and mutations of those that made valid
examples (``--engine`` chooses); with ``--corpus``, each target starts from the inputs an earlier
run kept there and keeps its own (libFuzzer: those of new coverage; random: those that made valid
examples), so a run in parts goes on where the last part stopped. ``--seconds`` is the budget of
the whole run, shared evenly by the targets; ``--executions`` caps each target. The run stops at
the first oracle failure: the failing buffer is saved under ``--out`` with a report of what the
test drew from it, and printed.
At the end: a table of the executions of each target (all calls, and those that ran the test to
its end: a buffer too short for the test's draws stops earlier), executions per second, failures.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .engines import Failure, Tally, run_atheris, run_random

__all__ = ["Failure", "main"]


def _atheris_installed() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


def _discover(name: str, engine: str) -> tuple[Any, Any]:
    """``(targets module, the target named name)``, its modules imported under atheris's coverage
    instrumentation of the toolkit when libFuzzer drives this process (before anything imports
    ``ingest_toolkit``: only what is imported inside the block is instrumented)."""
    if engine == "atheris":
        import atheris

        with atheris.instrument_imports(include=["ingest_toolkit"]):
            from . import targets

            found = targets.discover(name)
    else:
        from . import targets

        found = targets.discover(name)
    [target] = [t for t in found if t.name == name]
    return targets, target


def _shown(value: object, limit: int = 2000) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _file_name(target: str) -> str:
    """A target's name as a file or directory name (``::``, brackets and the like as ``_``)."""
    return "".join(c if c.isalnum() else "_" for c in target)


def _report(name: str, drawn: dict[str, Any], buffer: bytes, err: BaseException, out: Path) -> Failure:
    """Save the failing buffer and a report of the failure; print the report."""
    out.mkdir(parents=True, exist_ok=True)
    stem = _file_name(name)[-80:] + "-" + hashlib.sha1(buffer).hexdigest()[:12]
    path = out / f"{stem}.bin"
    path.write_bytes(buffer)
    error = "".join(traceback.format_exception(err)[-6:])
    drawn_text = "\n".join(f"  {key} = {_shown(value)}" for key, value in drawn.items())
    report = f"FAILURE in {name}\n{error}\ninput (saved to {path}):\n{drawn_text}\n"
    path.with_suffix(".txt").write_text(report)
    print(report, file=sys.stderr, flush=True)
    return Failure(error=error, input=drawn_text, path=str(path))


# -- one target, in its own process ------------------------------------------------------------------
def _child(args: argparse.Namespace) -> int:
    targets, target = _discover(args.child, args.engine)
    fixtures = targets.Fixtures()
    try:
        fuzz = target.fuzz_one_input(fixtures)

        def failed(buffer: bytes, err: BaseException) -> Failure:
            return _report(target.name, target.last_input, buffer, err, Path(args.out))

        corpus = _corpus_dir(args, target.name)
        if args.engine == "atheris":
            Path(args.out).mkdir(parents=True, exist_ok=True)
            run_atheris(fuzz, fixtures.clean, args.seconds, args.executions, args.seed, failed, Path(args.result),
                        Path(args.out), corpus)
        tally = run_random(fuzz, fixtures.clean, args.seconds, args.executions, args.seed, failed, corpus)
        tally.save(Path(args.result))
        return 1 if tally.failure else 0
    finally:
        fixtures.close()


def _corpus_dir(args: argparse.Namespace, name: str) -> Path | None:
    """The target's own directory under ``--corpus`` (one per engine: libFuzzer keeps inputs of
    new coverage, the random engine buffers that made valid examples), or None."""
    if not args.corpus:
        return None
    root: Path = Path(args.corpus)
    return root / str(args.engine) / _file_name(name)


def _replay(args: argparse.Namespace) -> int:
    from . import targets

    found = targets.discover(args.k)
    if len(found) != 1:
        print(f"--replay needs -k to name exactly one target; it matches {len(found)}", file=sys.stderr)
        return 2
    [target], fixtures = found, targets.Fixtures()
    try:
        target.fuzz_one_input(fixtures)(Path(args.replay).read_bytes())
    except BaseException as err:  # noqa: BLE001 - what the replay is for
        _report(target.name, target.last_input, Path(args.replay).read_bytes(), err, Path(args.out))
        return 1
    finally:
        fixtures.close()
    print(f"{target.name}: passes on {args.replay}")
    return 0


# -- the run: every target, a few at a time -----------------------------------------------------------
@dataclass
class _Running:
    name: str
    process: subprocess.Popen[bytes]
    result: Path
    log: Path
    stopped: bool = False  # terminated after another target failed


def _spawn(name: str, args: argparse.Namespace, engine: str, seconds: float, work: Path, index: int) -> _Running:
    result, log_path = work / f"result-{index}.json", work / f"log-{index}.txt"
    log = log_path.open("wb")
    command = [sys.executable, "-m", "tests.fuzz.long_run", "--child", name, "--engine", engine,
               "--seconds", str(seconds), "--executions", str(args.executions), "--seed", str(args.seed + index),
               "--out", args.out, "--result", str(result)] + (["--corpus", args.corpus] if args.corpus else [])
    return _Running(name, subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), result, log_path)


def _collect(running: _Running, engine: str) -> Tally:
    """The tally of a finished target; its process ending otherwise than by its budget or an
    oracle failure (libFuzzer stopping on a timeout, a crash) is a failure too."""
    code = running.process.wait()
    tally = Tally.load(running.result) if running.result.exists() else Tally(engine=engine)
    if running.stopped:
        tally.extra["stopped"] = "after another target's failure"
    elif code != 0 and tally.failure is None:
        tally.failure = Failure(error=f"the target's process ended with exit code {code}: see {running.log}",
                                input="", path="")
    return tally


def _run_all(args: argparse.Namespace, names: list[str], engine: str) -> dict[str, Tally]:
    """Each target in a child process, ``--jobs`` at a time; the others stopped at the first failure."""
    seconds = args.seconds / len(names) if args.seconds else 0.0
    work = Path(tempfile.mkdtemp(prefix="fuzz-run-"))
    pending, running, tallies = list(enumerate(names)), [], {}
    while pending or running:
        while pending and len(running) < args.jobs and not any(t.failure for t in tallies.values()):
            index, name = pending.pop(0)
            running.append(_spawn(name, args, engine, seconds, work, index))
        time.sleep(0.2)
        for job in [job for job in running if job.process.poll() is not None]:
            running.remove(job)
            tallies[job.name] = _collect(job, engine)
            if tallies[job.name].failure:
                pending.clear()
                for other in running:
                    other.stopped = True
                    other.process.terminate()  # our own children, by their handles
    print(f"(child logs: {work})")
    return tallies


def _table(tallies: dict[str, Tally], wall: float, engine: str) -> str:
    width = max(len(name) for name in tallies)
    lines = [f"{'target':<{width}}  {'executions':>12}  {'ran the test':>12}  {'exec/s':>9}  failures",
             "-" * (width + 52)]
    for name, t in tallies.items():
        rate = t.executions / t.seconds if t.seconds else 0.0
        failed = "stopped" if t.extra.get("stopped") else str(int(bool(t.failure)))
        lines.append(f"{name:<{width}}  {t.executions:>12,}  {t.valid:>12,}  {rate:>9,.0f}  {failed}")
    total, valid = sum(t.executions for t in tallies.values()), sum(t.valid for t in tallies.values())
    failures = sum(bool(t.failure) for t in tallies.values())
    lines += ["-" * (width + 52), f"{'all ' + str(len(tallies)) + ' targets':<{width}}  {total:>12,}  {valid:>12,}  "
              f"{total / wall if wall else 0:>9,.0f}  {failures}", f"engine: {engine}, wall time {wall:,.0f} s"]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz.long_run", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=0.0, help="budget of the whole run, shared evenly (0: none)")
    p.add_argument("--executions", type=int, default=0, help="executions per target at most (0: no cap)")
    p.add_argument("-k", default="", help="only the targets whose name contains this")
    p.add_argument("--engine", choices=["auto", "atheris", "random"], default="auto")
    p.add_argument("--jobs", type=int, default=1, help="targets run at the same time")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "fuzz-failures"), help="failing inputs go here")
    p.add_argument("--corpus", default=None,
                   help="keep each target's inputs here and start from them next time (a run in parts)")
    p.add_argument("--list", action="store_true", help="list the targets and the fixtures they take")
    p.add_argument("--replay", default=None, help="run the target named by -k on this saved buffer")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.engine == "auto":
        args.engine = "atheris" if _atheris_installed() else "random"
    if args.child:
        return _child(args)
    if args.replay:
        return _replay(args)
    from . import targets

    found = targets.discover(args.k)
    if args.list or not found:
        for target in found:
            print(f"{target.name}  (fixtures: {', '.join(target.fixture_names) or 'none'})")
        return 0 if found else 2
    if not args.seconds and not args.executions:
        print("give --seconds or --executions", file=sys.stderr)
        return 2
    start = time.perf_counter()
    tallies = _run_all(args, [t.name for t in found], args.engine)
    print(_table(tallies, time.perf_counter() - start, args.engine))
    return 1 if any(t.failure for t in tallies.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
