"""Child process for the SIGKILL test of a take window: commits some batches, holds the rest.

Prints the seqs it committed and the seqs of the batches it holds uncommitted (handed out and
received ahead), then hangs until it is killed.
"""

from __future__ import annotations

import sys
import time

from ingest_toolkit.rpc import AgentClient


def main() -> None:
    address, batch, window, commit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    client = AgentClient(address)
    pipeline = client.take_pipeline("events", batch, window=window, lease_seconds=600)
    committed: list[int] = []
    for _ in range(commit):
        taken = next(pipeline)
        taken.commit()
        committed += taken.columns.seqs
    held = [next(pipeline) for _ in range(window)]  # the whole window, uncommitted
    print("committed", *committed, flush=True)
    print("held", *(seq for taken in held for seq in taken.columns.seqs), flush=True)
    time.sleep(600)  # killed long before


if __name__ == "__main__":
    main()
