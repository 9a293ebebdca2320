"""What a user sees on a terminal (issue 31, items 2 and 3): the ``status`` screen refreshed in
place until ``q``, and the progress of ``send`` and ``land --drain``. Each command runs in a real
pseudo-terminal (pexpect) against a real agent made with ``ingest-toolkit init`` on ephemeral
ports. The assertions wait for what must appear (generous timeouts), never for how fast."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pexpect
import pytest

from .deployment import CLEAN_ENV, CLI, Deployment

pytestmark = pytest.mark.integration

WAIT = 120  # seconds any expected output may take on a loaded machine


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    started = Deployment(tmp_path_factory.mktemp("screens") / "ingest").start()
    try:
        yield started
    finally:
        started.stop()


def _terminal(deployment: Deployment, *args: str, env: dict[str, str] | None = None) -> pexpect.spawn:
    """``ingest-toolkit ARGS`` in a 50x180 terminal, from the deployment's directory."""
    return pexpect.spawn(CLI[0], [*CLI[1:], *args], cwd=str(deployment.root),
                         env={**CLEAN_ENV, "TERM": "xterm", **(env or {})}, dimensions=(50, 180), encoding="utf-8",
                         timeout=WAIT)


def _ended(child: pexpect.spawn) -> int:
    child.expect(pexpect.EOF)
    child.close()
    return int(child.exitstatus if child.exitstatus is not None else -1)


def _lines(n: int) -> str:
    return "".join(f"event {i}\n" for i in range(n))


def test_status_redraws_until_q_and_shows_what_was_just_sent(deployment: Deployment) -> None:
    child = _terminal(deployment, "status", "--interval", "0.5")
    child.expect(re.escape(f"agent 'local' (pid {deployment.pid})"))
    child.expect("channels")
    child.expect("spool_dir")  # the sources table
    child.expect("q or Ctrl-C quits")
    backlog = deployment.backlog()
    assert deployment.run("send", "--channel", "events", stdin=_lines(1234)).returncode == 0
    child.expect(re.escape(f"{backlog + 1234:,}"))  # a later screen has the new backlog
    child.send("q")
    assert _ended(child) == 0


def test_status_leaves_on_ctrl_c_without_a_trace(deployment: Deployment) -> None:
    child = _terminal(deployment, "status", "--interval", "0.5")
    child.expect("q or Ctrl-C quits")
    child.sendintr()
    assert _ended(child) == 0
    assert "Traceback" not in (child.before or "") and "Aborted" not in (child.before or "")


def test_send_shows_its_progress_on_a_terminal(deployment: Deployment) -> None:
    big = deployment.root / "big.txt"
    big.write_text(_lines(300_000))
    child = _terminal(deployment, "send", str(big), "--channel", "events")
    child.expect(re.escape(f"sending to agent 'local' (pid {deployment.pid})"))
    child.expect(r"sending .*[\d,]+ events in [\d,]+ batches acknowledged \([\d,]+ events/s\)")
    child.expect("sent 300,000 events in 300 batches: 300,000 accepted")
    assert _ended(child) == 0


def test_land_drain_on_a_terminal_shows_each_batch_as_it_completes(deployment: Deployment) -> None:
    """A Delta table (no Spark): the backlog found, then a line per batch above the live footer."""
    assert deployment.run("send", "--channel", "events", stdin=_lines(2500)).returncode == 0
    backlog = deployment.backlog()
    per_batch = -(-backlog // 3)  # three batches, whatever the earlier tests left in the channel
    child = _terminal(deployment, "land", "--channel", "events", "--format", "delta", "--max-events", str(per_batch),
                      "--drain")
    child.expect("through its gRPC endpoint")
    child.expect(re.escape(f"backlog: {backlog:,} committed events to land"))
    for _ in range(3):
        child.expect(r"batch \d+: landed [\d,]+ events")
    assert _ended(child) == 0
    assert deployment.backlog() == 0


def test_land_drain_with_spark_shows_the_spark_start_as_its_own_step(deployment: Deployment) -> None:
    """Plain Parquet through Spark: the start of Spark is a step of its own (spinner, then its
    time), then the batches. Into a root of its own: the deployment's holds the Delta table of the
    test above, and a channel's directory holds one format."""
    assert deployment.run("send", "--channel", "events", stdin=_lines(3000)).returncode == 0
    per_batch = -(-deployment.backlog() // 2)
    child = _terminal(deployment, "land", "--channel", "events", "--max-events", str(per_batch), "--drain",
                      env={"INGEST_LANDING__ROOT": str(deployment.root / "var" / "landing-parquet")})
    child.expect("starting Spark")
    child.expect(r"Spark started in [\d.]+ s")
    child.expect(r"batch \d+: landed [\d,]+ events")
    assert _ended(child) == 0
    assert deployment.backlog() == 0
