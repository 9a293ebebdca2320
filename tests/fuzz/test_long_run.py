"""The long-run driver (``long_run.py``) keeps working: it finds every target with what it needs,
runs one for a few seconds, and stops at a failure with the failing input saved."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from . import long_run, targets
from .engines import load_corpus, run_random

ROOT = Path(__file__).resolve().parents[2]


def test_every_target_is_found_and_its_fixtures_are_provided() -> None:
    found = targets.discover()
    modules = {t.name.split("::")[0] for t in found}
    assert {"test_channel_readers", "test_decoder_agreement", "test_wire_parsers"} <= modules
    assert not any(name.startswith("test_harness") for name in modules)  # the oracle's own tests
    assert len([t for t in found if "test_recovery_with_one_damaged_file[" in t.name]) == 6  # parametrized
    fixtures = targets.Fixtures()
    try:
        assert {name for t in found for name in t.fixture_names} <= set(fixtures._makers)
    finally:
        fixtures.close()


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.fuzz.long_run", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_a_short_run_of_one_target(tmp_path: Path) -> None:
    done = _run("--seconds", "3", "-k", "test_decoders_agree_on_damaged_payloads", "--engine", "random",
                "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = [line for line in done.stdout.splitlines() if line.startswith("test_decoder_agreement::")]
    executions = int(row.split()[1].replace(",", ""))
    assert executions > 10 and "engine: random" in done.stdout


def test_the_first_failure_stops_the_target_and_saves_its_input(tmp_path: Path) -> None:
    def fuzz(buffer: bytes) -> bytes | None:
        if len(buffer) > 200:
            raise AssertionError("the oracle failed")
        return buffer

    def failed(buffer: bytes, err: BaseException) -> long_run.Failure:
        return long_run._report("fake::target", {"drawn": buffer[:4]}, buffer, err, tmp_path)

    tally = run_random(fuzz, lambda: None, seconds=10, executions=0, seed=3, on_failure=failed)
    assert tally.failure is not None and "the oracle failed" in tally.failure.error
    saved = Path(tally.failure.path)
    assert len(saved.read_bytes()) > 200 and "drawn = " in saved.with_suffix(".txt").read_text()
    assert tally.executions == tally.valid + 1  # every call before the failing one passed


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris is not installed")
def test_a_short_run_under_libfuzzer(tmp_path: Path) -> None:
    done = _run("--seconds", "3", "-k", "test_grpc_transaction_requests", "--engine", "atheris",
                "--out", str(tmp_path), "--corpus", str(tmp_path / "corpus"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "engine: atheris" in done.stdout
    [kept] = (tmp_path / "corpus" / "atheris").iterdir()  # libFuzzer's inputs of new coverage
    assert any(kept.iterdir())


def test_a_run_in_parts_goes_on_from_the_corpus_the_last_part_kept(tmp_path: Path) -> None:
    marker = b"kept-by-the-first-part:" + bytes(range(200))

    def failed(buffer: bytes, err: BaseException) -> long_run.Failure:
        raise AssertionError(f"no call fails here: {err!r}")

    first = run_random(lambda buffer: marker, lambda: None, seconds=0, executions=50, seed=1,
                       on_failure=failed, corpus_dir=tmp_path / "corpus")
    assert first.extra["corpus_saved"] == "1" and load_corpus(tmp_path / "corpus") == [marker]

    seen: list[bytes] = []

    def recording(buffer: bytes) -> None:
        seen.append(buffer)  # keeps nothing: every mutated buffer comes from the saved corpus

    second = run_random(recording, lambda: None, seconds=0, executions=60, seed=2, on_failure=failed,
                        corpus_dir=tmp_path / "corpus")
    assert second.extra["corpus_loaded"] == "1"
    assert sum(marker[:40] in buffer or marker[-40:] in buffer for buffer in seen) >= 20  # ~2/3 are mutations
    seen.clear()
    run_random(recording, lambda: None, seconds=0, executions=60, seed=2, on_failure=failed)  # no corpus
    assert not any(marker[:40] in buffer or marker[-40:] in buffer for buffer in seen)


def test_the_corpus_option_keeps_a_directory_per_engine_and_target(tmp_path: Path) -> None:
    for _ in range(2):
        done = _run("--seconds", "2", "-k", "test_http_body_parser", "--engine", "random",
                    "--corpus", str(tmp_path / "corpus"), "--out", str(tmp_path / "out"))
        assert done.returncode == 0, done.stdout + done.stderr
    [target_dir] = (tmp_path / "corpus" / "random").iterdir()
    assert "test_http_body_parser" in target_dir.name and len(list(target_dir.iterdir())) > 0
