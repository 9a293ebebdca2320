"""Regenerate ``channel_pb2.py`` and its type stub from ``channel.proto`` (``dev`` extra).

Usage: ``python -m ingest_toolkit.channel.proto.generate [--out DIR]``. The test suite runs
it into a temporary directory and compares with the checked-in file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def generate(out_dir: Path) -> Path:
    from grpc_tools import protoc  # imported lazily: a dev-only dependency

    out_dir.mkdir(parents=True, exist_ok=True)
    args = [f"-I{HERE}", f"--python_out={out_dir}", f"--pyi_out={out_dir}", str(HERE / "channel.proto")]
    rc = protoc.main(["protoc", *args])
    if rc != 0:
        raise RuntimeError(f"protoc failed with exit code {rc}")
    return out_dir / "channel_pb2.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args(argv)
    print(generate(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
