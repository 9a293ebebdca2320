"""Columnar and Arrow takes: ``tx.take_columns`` / ``tx.take_arrow`` (+ ``build_table``) against
``tx.take`` (Event objects).

One batch of ``--events`` committed events of ``--event-size`` random bytes, with a ``timestamp``
header or without headers, in a durable channel. Each figure comes from a fresh child process
(so that peak RSS belongs to one take):

* the take alone, ``take`` (Events), ``take_columns`` (lists) and ``take_arrow`` (Arrow arrays),
  best of ``--repeats``, rolled back each time; and each columnar take + ``build_table`` (the
  landing does ``take_arrow`` + ``build_table`` in process, lists from a remote take);
* peak RSS growth of one take, against the bytes of the bodies it returns.

    python bench/take_columns.py            # 250k events, 5 repeats, about 1 minute
    python bench/take_columns.py --quick    # 20k events, 2 repeats
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.land.batches import build_table

_FILL_BATCH = 10_000
MODES = {"take": "tx.take (Event objects)", "columns": "tx.take_columns", "arrow": "tx.take_arrow",
         "columns+table": "tx.take_columns + build_table", "arrow+table": "tx.take_arrow + build_table"}


def _fill(directory: str, events: int, size: int, headers: bool) -> FileChannel:
    ch = FileChannel(checkpoint_dir=f"{directory}/checkpoint", data_dirs=[f"{directory}/data"],
                     capacity=2 * events, transaction_capacity=max(events, _FILL_BATCH))
    base = 1_763_900_000_000
    for start in range(0, events, _FILL_BATCH):
        with ch.transaction() as tx:
            tx.put_many([Event(os.urandom(size), {"timestamp": str(base + i)} if headers else {})
                         for i in range(start, min(events, start + _FILL_BATCH))])
    return ch


def _peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(mode: str, events: int, size: int, headers: bool, repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="take-columns-") as work:
        ch = _fill(work, events, size, headers)
        with ch.transaction() as warm:  # pyarrow's kernels and allocator start once, not per batch
            take = warm.take_arrow if mode.startswith("arrow") else warm.take_columns
            build_table(take(10), channel_id=ch.channel_id, batch_id="warm", ingest_time_us=0)
            warm.rollback()
        gc.collect()
        gc.disable()  # as the landing does while a batch's objects are built
        before = _peak_kib()
        best = float("inf")
        for _ in range(repeats):
            tx = ch.transaction()
            started = time.perf_counter()
            if mode == "take":
                got = len(tx.take(events))
            elif mode in ("columns", "arrow"):
                got = len(tx.take_columns(events) if mode == "columns" else tx.take_arrow(events))
            else:
                taken = tx.take_columns(events) if mode == "columns+table" else tx.take_arrow(events)
                table = build_table(taken, channel_id=ch.channel_id, batch_id="bench",
                                    ingest_time_us=time.time_ns() // 1000)
                got = table.num_rows
                del table, taken
            best = min(best, time.perf_counter() - started)
            tx.rollback()
            assert got == events, (got, events)
        growth = (_peak_kib() - before) / 1024
        ch.close()
    return {"events_per_s": events / best, "peak_growth_mib": growth, "body_mib": events * size / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=250_000)
    parser.add_argument("--event-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "HEADERS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.events, args.repeats = 20_000, 2
    if args.child:
        mode, headers = args.child
        print(json.dumps(child(mode, args.events, args.event_size, headers == "1", args.repeats)))
        return
    print(f"{args.events:,} events of {args.event_size} B, best of {args.repeats}, "
          f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    for headers in (True, False):
        figures = {}
        for mode in MODES:
            out = subprocess.run([sys.executable, __file__, "--events", str(args.events), "--event-size",
                                  str(args.event_size), "--repeats", str(args.repeats),
                                  "--child", mode, "1" if headers else "0"],
                                 check=True, capture_output=True, text=True).stdout
            figures[mode] = json.loads(out.strip().splitlines()[-1])
        base = figures["take"]["events_per_s"]
        print(f"\n{'with a timestamp header' if headers else 'without headers'} "
              f"(bodies {figures['take']['body_mib']:.0f} MiB)")
        for mode, label in MODES.items():
            f = figures[mode]
            print(f"  {label:<32} {f['events_per_s']:>10,.0f} events/s  {f['events_per_s'] / base:5.2f}x take   "
                  f"peak RSS +{f['peak_growth_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
