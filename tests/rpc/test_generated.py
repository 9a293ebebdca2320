"""The checked-in protobuf and gRPC code matches ``agent.proto``."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest

from ingest_toolkit.rpc.proto.generate import GENERATED, HERE, generate


def test_checked_in_generated_code_is_current(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    generate(tmp_path)
    for name in GENERATED:
        assert filecmp.cmp(tmp_path / name, HERE / name, shallow=False), (
            f"{name} is stale: run `python -m ingest_toolkit.rpc.proto.generate`")
