"""A throwaway PostgreSQL server on 127.0.0.1 for the tests that need one (the Iceberg SQL catalog
shared by several writers): ``initdb`` into a temporary directory, ``pg_ctl start`` on a free
port, trust authentication, stopped and removed at the end.

The server binaries come from the operating system's PostgreSQL package (``initdb`` on the PATH,
or under ``/usr/lib/postgresql/<version>/bin``). PostgreSQL refuses to run as root: under root
the server runs as the ``postgres`` user the package creates. Without the binaries the tests
that need them are skipped, unless ``INGEST_REQUIRE_POSTGRES=1`` (CI sets it) makes that a failure.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["postgres_server"]


def _bin_dir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(candidates[-1]).parent if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def postgres_server() -> Iterator[str]:
    """A running server; yields the SQLAlchemy URL of its ``postgres`` database (user ``ingest``)."""
    bindir = _bin_dir()
    if bindir is None:
        if os.environ.get("INGEST_REQUIRE_POSTGRES"):
            raise AssertionError("INGEST_REQUIRE_POSTGRES is set but no PostgreSQL server binaries (initdb) are here")
        pytest.skip("no PostgreSQL server binaries (initdb): install the postgresql package")
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    root = Path(tempfile.mkdtemp(prefix="ingest-pg-"))
    try:
        root.chmod(0o755)
        if as_user:
            shutil.chown(root, "postgres", "postgres")
        data, port = root / "data", _free_port()
        run = [*as_user, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "ingest", "--no-sync"]
        subprocess.run(run, check=True, capture_output=True, timeout=120)
        options = f"-p {port} -h 127.0.0.1 -k {root} -F"
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"),
                        "-w", "start"], check=True, capture_output=True, timeout=120)
        try:
            yield f"postgresql+psycopg2://ingest@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                           capture_output=True, timeout=60)
    finally:
        shutil.rmtree(root, ignore_errors=True)
