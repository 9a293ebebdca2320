"""Child process for the SIGKILL test: opens a remote take, reports it, then hangs."""

from __future__ import annotations

import sys
import time

from ingest_toolkit.rpc import AgentClient


def main() -> None:
    address, count, lease = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    client = AgentClient(address)
    take = client.open_take("events", count, lease_seconds=lease)
    print("taken", " ".join(str(e.seq) for e in take.events), flush=True)
    time.sleep(600)  # killed long before


if __name__ == "__main__":
    main()
