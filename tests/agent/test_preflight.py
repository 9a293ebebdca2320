"""``agent --check`` finds what the start would find, and the start finds it before opening anything.

Issue 32: a topology whose sink named an unset token variable and a CA file that did not exist
passed ``--check`` ("configuration OK") and failed at the start, after its channel was opened.
Both run one preflight now (ingest_toolkit/collect/preflight.py): each case below fails the check
and the start with the same one-line error naming the setting, and the start leaves no channel
directory behind. Real CLI processes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.certs import self_signed

from ..fleet.harness import FleetSetup, forward_sink, free_port
from .harness import REPO

pytestmark = pytest.mark.integration

UNSET = "INGEST_PREFLIGHT_TEST_UNSET_TOKEN"


def _run(setup: FleetSetup, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != UNSET}
    return subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", "agent", "--conf", str(setup.conf), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=60, env=env)


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another process (this one) listens on."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield int(listener.getsockname()[1])


def _sink(extra: str) -> Callable[[Path, int], dict[str, object]]:
    return lambda root, _port: {"extra": forward_sink("up", "127.0.0.1:7431", extra=extra)}


def _server_tls(root: Path, _port: int) -> dict[str, object]:
    cert, _key = self_signed(root / "tls")
    return {"extra": f'[agent.security.tls]\ncert_file = "{cert}"\nkey_file = "{root / "tls" / "missing.key"}"\n'}


CASES: dict[str, tuple[Callable[[Path, int], dict[str, object]], str, str]] = {
    "a sink's token variable unset": (_sink(f'token_env = "{UNSET}"\n'), "sinks.up.token_env",
                                      f"{UNSET} (a bearer token) is unset or empty"),
    "a sink's CA file missing": (_sink('tls_ca = "conf/tls/no-such-ca.pem"\n'), "sinks.up.tls_ca", "cannot read"),
    "the gRPC port in use": (lambda root, port: {"grpc_port": port}, "agent.grpc.port", "is already in use"),
    "the gRPC endpoint's token variable unset": (
        lambda root, port: {"extra": f'[agent.security]\ntoken_env = "{UNSET}"\n'}, "agent.security.token_env",
        "unset or empty"),
    "the gRPC endpoint's key file missing": (_server_tls, "agent.security.tls", "missing.key"),
    "an exec source's program missing": (
        lambda root, port: {"extra": '[sources.cmd]\ntype = "exec"\nchannels = ["events"]\n'
                                     'command = ["no-such-program-for-the-preflight"]\n'},
        "sources.cmd.command", "'no-such-program-for-the-preflight' is not found or not executable on the PATH"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_check_and_the_start_fail_alike_before_anything_is_opened(tmp_path: Path, busy_port: int,
                                                                       case: str) -> None:
    make, key, message = CASES[case]
    setup = FleetSetup(tmp_path, **make(tmp_path, busy_port))  # type: ignore[arg-type]
    lines = []
    for args in (["--check"], []):
        done = _run(setup, *args)
        assert done.returncode == 1, (case, args, done.stdout, done.stderr)
        assert "configuration OK" not in done.stdout and "Traceback" not in done.stderr, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert f"{key}: " in line and message in line, line
        lines.append(line)
    assert lines[0] == lines[1]  # the check said what the start says
    assert not setup.checkpoint_dir().exists() and not (tmp_path / "ports.json").exists()  # nothing opened


def test_every_problem_is_listed_at_once_and_a_sound_configuration_passes(tmp_path: Path) -> None:
    port = free_port()
    setup = FleetSetup(tmp_path / "bad", grpc_port=port, extra=forward_sink(
        "up", "127.0.0.1:7431", extra=f'token_env = "{UNSET}"\ntls_ca = "missing-ca.pem"\n'))
    text = setup.conf.read_text()
    setup.conf.write_text(text.replace("[agent.admin]\nport = 0\n", f"[agent.admin]\nport = {port}\n"))
    done = _run(setup, "--check")
    assert done.returncode == 1
    for key in ("sinks.up.token_env", "sinks.up.tls_ca", "agent.admin.port"):
        assert key in done.stderr, done.stderr
    assert "port " + str(port) + " is also agent.grpc.port" in done.stderr
    good = FleetSetup(tmp_path / "good", grpc_port=free_port(), extra=forward_sink("up", "127.0.0.1:7431"))
    done = _run(good, "--check")
    assert done.returncode == 0, done.stderr
    assert "configuration OK" in done.stdout and "sinks up" in done.stdout and "port free" in done.stdout
