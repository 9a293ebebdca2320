"""No child process outlives its test: a failed assertion must not leave an agent running that
would keep writing checkpoints into the next run's directories."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from .harness import LIVE


@pytest.fixture(autouse=True)
def _kill_leftover_children() -> Iterator[list[subprocess.Popen[bytes]]]:
    yield LIVE
    while LIVE:
        proc = LIVE.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
