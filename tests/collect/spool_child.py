"""Child process for the SIGKILL test: ingests a spool dir and kills itself at a chosen point.

argv: JSON {"channel": {...settings}, "spool": dir, "state": dir, "point": name, "after": n, "batch": n}
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from ingest_toolkit.channel import FileChannel
from ingest_toolkit.collect.pipeline import Pipeline
from ingest_toolkit.collect.selectors import ReplicatingSelector
from ingest_toolkit.collect.sources.spool_dir import SpoolDirSettings, SpoolDirSource


def main() -> None:
    args = json.loads(sys.argv[1])
    channel = FileChannel(**args["channel"])
    pipeline = Pipeline({"ch": channel}, selector=ReplicatingSelector(["ch"]), name="child")
    settings = SpoolDirSettings(type="spool_dir", dir=Path(args["spool"]), channels=["ch"],
                                batch_size=args["batch"], file_header="file")
    source = SpoolDirSource("spool", settings, pipeline, state_dir=Path(args["state"]))
    seen = {"n": 0}

    def hook(point: str) -> None:
        if point == args["point"]:
            seen["n"] += 1
            if seen["n"] == args["after"]:
                os.kill(os.getpid(), signal.SIGKILL)

    source.crash_hook = hook
    source.poll()
    channel.close()


if __name__ == "__main__":
    main()
