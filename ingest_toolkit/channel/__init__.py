"""Durable write-ahead-log channel with Flume FileChannel semantics.

>>> ch = FileChannel(checkpoint_dir="cp", data_dirs=["data"])   # doctest: +SKIP
>>> with ch.transaction() as tx:                                 # doctest: +SKIP
...     tx.put(Event(b"hello", {"k": "v"}))
"""

from __future__ import annotations

from .channel import FileChannel
from .codec import Event, EventColumns
from .config import ChannelConfig
from .tags import InvalidTagError, TagRecord
from .transaction import Transaction, TxnKind, TxnState

__all__ = ["ChannelConfig", "Event", "EventColumns", "FileChannel", "InvalidTagError", "TagRecord", "Transaction",
           "TxnKind", "TxnState"]
