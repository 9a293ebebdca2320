"""``send``'s progress when stderr is not a terminal: a line now and then, never one per batch (the
terminal's live line is tested in a real pty: tests/agent/test_live_screens.py)."""

from __future__ import annotations

import pytest

from ingest_toolkit.collect import send_progress
from ingest_toolkit.collect.send_progress import SendProgress


def test_a_line_every_interval_and_none_per_batch(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with SendProgress(None, terminal=False) as progress:
        for _ in range(50):
            progress.acknowledged(1000, 8000)
    assert capsys.readouterr().err == ""  # 50 batches in far less than LINE_EVERY seconds
    monkeypatch.setattr(send_progress, "LINE_EVERY", 0.0)
    with SendProgress(None, terminal=False) as progress:
        progress.acknowledged(1000, 8000)
        progress.note("batch send-1: AgentUnavailableError: ...; retrying in 0.2s")
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("sending: 1,000 events in 1 batch acknowledged (") and lines[0].endswith(" events/s)")
    assert lines[1] == "batch send-1: AgentUnavailableError: ...; retrying in 0.2s"
