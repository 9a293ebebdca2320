"""Child process of the checkpoint crash tests (``test_checkpoint_crash.py``): commits and checkpoints
until it is killed.

Run it by path with the test's interpreter::

    python checkpoint_child.py CHECKPOINT_DIR DATA_DIR [DATA_DIR ...] --wait-go
                               [--seed S] [--interval SECONDS] [--checkpoint-share P]

It does the work of ``crash_child.py`` (random put and take transactions, some rolled back, some
spilling frames before their commit, bodies that encode a counter) with two additions: the
background checkpoint thread runs every ``--interval`` seconds, and after a step, with
probability ``--checkpoint-share``, the worker calls ``FileChannel.checkpoint()`` itself. The
report on stdout is crash_child's (``OPENING``, ``READY``, ``BEGIN``/``OK``/``RB`` lines; see its
docstring) plus:

================================  ======================================================
``CKPT begin``                    ``checkpoint()`` is about to be called
``CKPT done <id> <ms> <deleted>``  it returned: checkpoint id, duration, segments deleted
================================  ======================================================

so the parent can aim its SIGKILL at a checkpoint and knows whether one was cut short.
With ``--wait-go`` the child imports everything, then waits for ``go <start>`` on stdin.

With ``--backup-dir`` the channel keeps a backup copy of its checkpoints there; every file
operation the copy makes in that directory is announced first (``BKUP <op> <file name>``) and
then delayed by ``--backup-delay`` seconds, so the parent can kill the child at a chosen step of
the copy (it dies during the delay, before the announced operation).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import crash_child  # type: ignore[import-not-found,unused-ignore]  # noqa: E402  (the sibling module)

from ingest_toolkit.channel import FileChannel  # noqa: E402
from ingest_toolkit.channel.fs import File, OsFileSystem  # noqa: E402
from ingest_toolkit.errors import ChannelLockedError  # noqa: E402

say = crash_child.say


def channel_settings(checkpoint_dir: str, data_dirs: Sequence[str], interval: float) -> dict[str, Any]:
    """crash_child's settings (256 KiB segments, 4 KiB spill) with a checkpoint interval."""
    settings: dict[str, Any] = crash_child.channel_settings(checkpoint_dir, data_dirs, "fsync")
    settings["checkpoint_interval"] = interval
    return settings


class AnnouncedFile:
    """A file of the backup directory: each write and sync is announced, then delayed."""

    def __init__(self, fs: BackupAnnouncingFileSystem, real: File) -> None:
        self._fs, self._real, self.path = fs, real, real.path

    def pwrite(self, data: bytes | memoryview, offset: int) -> None:
        self._fs.announce("pwrite", self.path)
        self._real.pwrite(data, offset)

    def sync(self) -> None:
        self._fs.announce("sync", self.path)
        self._real.sync()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class BackupAnnouncingFileSystem(OsFileSystem):
    """The real file system; operations that change the backup directory are announced first."""

    def __init__(self, backup_dir: str, delay: float) -> None:
        self.backup_dir, self.delay = os.path.abspath(backup_dir), delay

    def announce(self, op: str, path: str) -> None:
        if os.path.abspath(os.path.dirname(path)) == self.backup_dir or os.path.abspath(path) == self.backup_dir:
            say(f"BKUP {op} {os.path.basename(path)}")
            time.sleep(self.delay)

    def create(self, path: str) -> File:
        self.announce("create", path)
        real = super().create(path)
        return AnnouncedFile(self, real) if os.path.abspath(os.path.dirname(path)) == self.backup_dir else real

    def rename(self, src: str, dst: str) -> None:
        self.announce("rename", dst)
        super().rename(src, dst)

    def unlink(self, path: str) -> None:
        self.announce("unlink", path)
        super().unlink(path)

    def sync_dir(self, path: str) -> None:
        self.announce("sync_dir", path)
        super().sync_dir(path)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint_dir")
    parser.add_argument("data_dirs", nargs="+")
    parser.add_argument("--start", type=int, default=1, help="first counter to put")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--interval", type=float, default=0.02, help="background checkpoint interval")
    parser.add_argument("--checkpoint-share", type=float, default=0.5,
                        help="probability of an explicit checkpoint() after each step")
    parser.add_argument("--wait-go", action="store_true",
                        help="before opening, wait for 'go <start>' on stdin (overrides --start)")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="exit after this long")
    parser.add_argument("--backup-dir", default=None, help="keep a backup copy of each checkpoint here")
    parser.add_argument("--backup-delay", type=float, default=0.0,
                        help="announce each file operation of the backup copy, then wait this long")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.wait_go:
        words = sys.stdin.readline().split()
        if not words:
            return 0  # the parent went away without starting us
        args.start = int(words[1])
    say("OPENING")
    try:
        settings = channel_settings(args.checkpoint_dir, args.data_dirs, args.interval)
        if args.backup_dir:
            settings["backup_checkpoint_dir"] = args.backup_dir
            settings["fs"] = BackupAnnouncingFileSystem(args.backup_dir, args.backup_delay)
        channel = FileChannel(**settings)
    except ChannelLockedError as err:
        say(f"LOCKED {err.holder}")
        return 3
    say(f"READY {len(channel)}")
    rng = random.Random(args.seed)
    worker = crash_child.Worker(channel, args.start, rng)
    deadline = time.monotonic() + args.max_seconds
    while time.monotonic() < deadline:  # a safety net: the parent normally kills us long before
        worker.step()
        if rng.random() < args.checkpoint_share:
            say("CKPT begin")
            result = channel.checkpoint()
            deleted = ",".join(map(str, result.deleted_logs)) or "-"
            say(f"CKPT done {result.meta.checkpoint_id} {result.seconds * 1000:.1f} {deleted}")
    channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
