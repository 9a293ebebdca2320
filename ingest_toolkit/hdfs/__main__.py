"""``python -m ingest_toolkit.hdfs --data DIR``: the same as ``ingest-toolkit hdfs start``."""

from __future__ import annotations

from ..cli import main

if __name__ == "__main__":
    main(["hdfs", "start", *__import__("sys").argv[1:]], prog_name="python -m ingest_toolkit.hdfs")
