"""Building real channels and configuration directories for the orchestration tests (no Dagster)."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.channel.checkpoint import CHECKPOINT_META, decode_meta, encode_meta
from ingest_toolkit.orchestrate.settings import ChannelSpec, OrchestrationSettings, load_channel_specs

__all__ = ["Setup", "damage_channel", "events_at", "fill", "make_setup"]

HOUR_MS = 3_600_000


@dataclass
class Setup:
    root: Path
    conf: Path
    settings: OrchestrationSettings
    spec: ChannelSpec

    def open(self) -> FileChannel:
        return FileChannel(**self.spec.settings)


def make_setup(root: Path, *, channel: str = "events", capacity: int = 10_000,
               checkpoint_interval: float = 0.0, **settings: object) -> Setup:
    """A conf dir (agent.toml with one channel, landing.toml) under ``root``; absolute paths."""
    conf = root / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "agent.toml").write_text(
        f'[channels.{channel}]\ncheckpoint_dir = "{root}/channel/checkpoint"\n'
        f'data_dirs = ["{root}/channel/data"]\ncapacity = {capacity}\ntransaction_capacity = 1000\n'
        f'min_free_bytes = 0\ncheckpoint_interval = {checkpoint_interval}\nmax_file_size = 65536\n'
        'preallocate_bytes = 0\nmax_event_size = 4096\n')
    (conf / "landing.toml").write_text(
        f'[landing]\nroot = "{root}/landing"\nmax_events = 1000\n\n[spark]\nmaster = "local[2]"\n')
    values = {"agent_conf": str(conf / "agent.toml"), "landing_conf": str(conf / "landing.toml"),
              "curated_root": str(root / "curated"), **settings}
    orchestration = OrchestrationSettings(**values)  # type: ignore[arg-type]
    return Setup(root, conf, orchestration, load_channel_specs(conf / "agent.toml")[0])


def events_at(count: int, start_ms: int, step_ms: int = 1000, size: int = 64) -> list[Event]:
    """``count`` events whose ``timestamp`` header (epoch ms) starts at ``start_ms``."""
    return [Event(body=json.dumps({"n": i}).encode().ljust(size, b" "),
                  headers={"timestamp": str(start_ms + i * step_ms)}) for i in range(count)]


def fill(channel: FileChannel, events: list[Event], batch: int = 500) -> None:
    for at in range(0, len(events), batch):
        with channel.transaction() as tx:
            tx.put_many(events[at:at + batch])


def hour_ms(text: str) -> int:
    """Epoch milliseconds of an ISO time such as ``2026-11-20T08:00:00+00:00``."""
    from datetime import datetime

    return int(datetime.fromisoformat(text).timestamp() * 1000)


def wait_until(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def damage_channel(spec: ChannelSpec, saved: Path) -> list[str]:
    """Damage as docs/runbook.md describes: fill and mostly drain the channel, copy its deleted
    segments back (``orphaned``, via ``saved``) and raise one reference count in checkpoint.meta
    (``mismatches``); the names of the files copied back."""
    data_dir = spec.data_dirs[0]
    channel = FileChannel(**spec.settings)
    try:
        fill(channel, events_at(600, 0, size=200))  # 64 KiB segments: several
        shutil.copytree(data_dir, saved)
        with channel.transaction() as tx:
            tx.take(500)
        channel.checkpoint()  # the drained segments are deleted after it
    finally:
        channel.close()
    restored = sorted(n for n in os.listdir(saved) if n.startswith("log-") and not os.path.exists(
        os.path.join(data_dir, n)))
    for name in restored:
        shutil.copy2(saved / name, os.path.join(data_dir, name))
    path = os.path.join(spec.checkpoint_dir, CHECKPOINT_META)
    with open(path, "rb") as f:
        meta = decode_meta(f.read())
    needed = max(k for k, v in meta.log_refcounts.items() if v)
    meta.log_refcounts[needed] += 7
    with open(path, "wb") as f:
        f.write(encode_meta(meta))
    return restored
