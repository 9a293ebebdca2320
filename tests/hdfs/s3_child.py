"""Run in a process of its own with a Spark session whose classpath has hadoop-aws (the test
session's Spark has not): races on the manifest commit log of an ``s3a://`` root, printed as
JSON. ``python -m tests.hdfs.s3_child <settings.json>``."""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from ingest_toolkit.land import SparkSettings, spark_session
from ingest_toolkit.land.errors import CommitConflict
from ingest_toolkit.land.manifest import Manifest, ManifestLog
from ingest_toolkit.land.storage import HadoopStorage

CID = bytes(range(16))


def _draft(batch: str, lo: int, hi: int) -> Manifest:
    return Manifest(channel="ch", channel_id=CID.hex(), batch_id=batch, seq_ranges=((lo, hi),), count=hi - lo + 1,
                    files=(), created="2026-01-01T00:00:00Z")


def main(settings: dict[str, Any]) -> dict[str, Any]:
    spark = spark_session(SparkSettings(master="local[1]", conf=settings["conf"]))
    store = HadoopStorage(settings["root"], spark)
    out: dict[str, Any] = {"conditional": store.conditional_create()}
    store.create_exclusive("raw/name", b"first")
    try:  # the store itself refuses: no existence check in front of this write
        store._create_if_absent("raw/name", b"second")
        out["raw"] = "replaced"
    except FileExistsError:
        out["raw"] = "refused"
    out["raw_bytes"] = store.read_bytes("raw/name").decode()
    log, results = ManifestLog(store, "ch"), {}
    start = threading.Barrier(2)

    def committer(name: str) -> None:
        start.wait()  # both checked the log when it was empty (after=0) and commit number 1 at once
        try:
            results[name] = log.commit(_draft(name, 1, 100), after=0).commit
        except CommitConflict as err:
            results[name] = f"conflict: {err}"

    threads = [threading.Thread(target=committer, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out["race"] = results
    out["commits"] = [(m.commit, m.batch_id) for m in log.manifests()]
    spark.stop()
    return out


if __name__ == "__main__":
    with open(sys.argv[1]) as handle:
        print("RESULT " + json.dumps(main(json.load(handle))))
