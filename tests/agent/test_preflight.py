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


# -- ports (issue 31, item 4) -------------------------------------------------------------------
def _ports_taken(root: Path, grpc_port: int, admin_port: int) -> FleetSetup:
    """An agent on fixed ports with a spool-directory source (whose start would be logged)."""
    (root / "spool").mkdir(parents=True)
    setup = FleetSetup(root, grpc_port=grpc_port, extra=f'[sources.spool]\ntype = "spool_dir"\n'
                                                      f'dir = "{root / "spool"}"\nchannels = ["events"]\n')
    text = setup.conf.read_text().replace("[agent.admin]\nport = 0\n", f"[agent.admin]\nport = {admin_port}\n")
    setup.conf.write_text(text)
    return setup


def _listener() -> socket.socket:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return listener


_GRPC_CORE = ("WARNING: All log messages before absl::InitializeLog()", "add_port.cc", "ev_epoll1_linux",
              "chttp2_server.cc")


def test_the_check_and_the_start_report_both_ports_taken(tmp_path: Path) -> None:
    with _listener() as grpc_taken, _listener() as admin_taken:
        grpc_port, admin_port = grpc_taken.getsockname()[1], admin_taken.getsockname()[1]
        setup = _ports_taken(tmp_path, grpc_port, admin_port)
        for args in (["--check"], []):
            done = _run(setup, *args)
            assert done.returncode == 1 and "configuration OK" not in done.stdout
            (line,) = done.stderr.strip().splitlines()
            assert f"agent.grpc.port: 127.0.0.1:{grpc_port} is already in use" in line, line
            assert f"agent.admin.port: 127.0.0.1:{admin_port} is already in use" in line, line
    assert not setup.checkpoint_dir().exists()  # nothing opened


# The ports are taken between the check and the bind: the fault is injected by a check that finds
# the ports free (the race of a process that binds first); everything else is the command's own.
_RACE = ("import sys\nfrom ingest_toolkit.cli import main\nfrom ingest_toolkit.collect import preflight\n"
         "preflight.port_problems = lambda config: []\nsys.argv[0] = 'ingest-toolkit'\nmain()\n")


@pytest.mark.parametrize("endpoint", ["grpc", "admin"])
def test_a_port_taken_after_the_check_fails_the_start_before_any_source_and_quietly(tmp_path: Path,
                                                                                    endpoint: str) -> None:
    with _listener() as taken:
        port = taken.getsockname()[1]
        setup = _ports_taken(tmp_path, port if endpoint == "grpc" else free_port(),
                             port if endpoint == "admin" else free_port())
        lines = {}
        for level in ("INFO", "WARNING"):
            done = subprocess.run([sys.executable, "-c", _RACE, "agent", "--conf", str(setup.conf),
                                   "--log-level", level], capture_output=True, text=True, cwd=REPO, timeout=60)
            assert done.returncode == 1, done.stderr
            lines[level] = done.stderr.strip().splitlines()
    error = lines["WARNING"][-1]
    assert lines["WARNING"] == [error]  # gRPC's C core adds nothing to the one-line error
    assert error.startswith("Error: ConfigError: ") and f"agent.{endpoint}.port" in error, error
    assert f"{port}" in error and f"set agent.{endpoint}.port to a free port" in error, error
    assert lines["INFO"][-1] == error and not any(line.startswith(_GRPC_CORE) or any(
        p in line for p in _GRPC_CORE) for line in lines["INFO"]), lines["INFO"]
    assert not any("starting source" in line for line in lines["INFO"]), lines["INFO"]  # no source started
