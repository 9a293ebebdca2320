"""Regenerate ``agent_pb2.py``, its type stub and ``agent_pb2_grpc.py`` from ``agent.proto`` (``dev`` extra).

Usage: ``python -m ingest_toolkit.rpc.proto.generate [--out DIR]``. The test suite runs it into a
temporary directory and compares with the checked-in files.

protoc runs with the repository root as include path, so the generated gRPC module imports
``ingest_toolkit.rpc.proto.agent_pb2`` by its package path (a bare ``import agent_pb2`` would
only work with the proto directory on ``sys.path``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

__all__ = ["GENERATED", "HERE", "generate"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]  # the directory that holds the ingest_toolkit package
GENERATED = ("agent_pb2.py", "agent_pb2.pyi", "agent_pb2_grpc.py")


def generate(out_dir: Path) -> list[Path]:
    """Write the generated files into ``out_dir``; returns their paths."""
    from grpc_tools import protoc  # imported lazily: a dev-only dependency

    out_dir.mkdir(parents=True, exist_ok=True)
    proto = HERE.relative_to(ROOT) / "agent.proto"
    with tempfile.TemporaryDirectory() as tmp:
        args = [f"-I{ROOT}", f"--python_out={tmp}", f"--pyi_out={tmp}", f"--grpc_python_out={tmp}",
                str(ROOT / proto)]
        rc = protoc.main(["protoc", *args])
        if rc != 0:
            raise RuntimeError(f"protoc failed with exit code {rc}")
        made = Path(tmp) / proto.parent
        grpc_module = made / "agent_pb2_grpc.py"  # not lint-clean as generated: keep ruff off it
        grpc_module.write_text("# ruff: noqa\n" + grpc_module.read_text())
        return [Path(shutil.copyfile(made / name, out_dir / name)) for name in GENERATED]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
