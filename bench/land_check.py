"""How long ``land --check`` takes to refuse a landing root that cannot be written.

Run from the repository root with the ``[spark]`` extra (the check must decide without starting
Spark)::

    python bench/land_check.py [--repeats 5]

Makes a channel of 1,000 events in a new temporary directory and a landing configuration whose
root lies under a regular file (so it can never be created), then times, as whole processes
(Python's start and the imports included): ``ingest-toolkit land --check`` (must exit 1 naming
the root), a plain ``ingest-toolkit land`` of the same configuration (must refuse before its take:
the channel still holds 1,000 events afterwards), and ``ingest-toolkit --version`` for the cost
of starting the command at all. Prints the median and range of each and the ratio of the check
to the bare start. Deletes its directory at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "ingest_toolkit.cli"]


def _settings(base: Path) -> dict[str, Any]:
    return {"checkpoint_dir": str(base / "checkpoint"), "data_dirs": [str(base / "data")]}


def _channel(base: Path) -> Path:
    from ingest_toolkit.channel import Event, FileChannel

    settings = _settings(base)
    channel = FileChannel(**settings)
    with channel.transaction() as tx:
        tx.put_many([Event(f"event {i}".encode(), {"timestamp": "1763798400000"}) for i in range(1000)])
    channel.close()
    conf = base / "channel.toml"
    conf.write_text("[channel]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    return conf


def _timed(args: list[str], expect: int, repeats: int, says: str = "") -> list[float]:
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        done = subprocess.run(args, capture_output=True, text=True, timeout=300)
        seconds.append(time.perf_counter() - started)
        if done.returncode != expect or says not in done.stdout + done.stderr:
            raise SystemExit(f"{' '.join(args[2:])}: exit {done.returncode}, expected {expect} saying {says!r}: "
                             f"{done.stderr[-500:]}")
    return seconds


def _line(what: str, seconds: list[float]) -> str:
    return f"{what:<34} median {statistics.median(seconds):.2f} s  (range {min(seconds):.2f}-{max(seconds):.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="land-check-") as tmp:
        base = Path(tmp)
        channel_conf = _channel(base)
        (base / "blocker").write_text("a regular file where the landing root's parent should be")
        landing = base / "landing.toml"
        landing.write_text(f'[landing]\nroot = "{base / "blocker" / "landing"}"\nchannel_conf = "{channel_conf}"\n')
        land = [*CLI, "land", "--conf", str(landing), "--channel", "events"]
        check = _timed([*land, "--check"], 1, args.repeats, says="cannot be created")
        refused = _timed(land, 1, args.repeats, says="nothing was taken")
        bare = _timed([*CLI, "--version"], 0, args.repeats)
        from ingest_toolkit.channel import FileChannel

        channel = FileChannel(**_settings(base))
        left = len(channel)
        channel.close()
    print(_line("land --check (unwritable root)", check))
    print(_line("land (refused before the take)", refused))
    print(_line("--version (the start alone)", bare))
    print(f"check / start: {statistics.median(check) / statistics.median(bare):.2f}x; events left in the channel: "
          f"{left:,} of 1,000")
    return 0 if left == 1000 else 1


if __name__ == "__main__":
    sys.exit(main())
