"""File operations of the landing outside Spark's own write: manifests, moves, syncs, cleanup.

One small interface (:mod:`.base`), rooted at the landing root URI and taking '/'-separated
paths relative to it, with one module per backend:

* :mod:`.local` - :class:`LocalStorage` for ``file://`` roots: plain system calls with fsync, the
  only backend that makes landed files durable against power loss;
* :mod:`.hadoop` - :class:`HadoopStorage` calls the Hadoop ``FileSystem`` API in the driver's JVM
  (py4j): ``hdfs://``, ``s3a://`` (with S3's conditional create), ``abfs://`` ... with Spark's own
  settings;
* :mod:`.arrow` - :class:`ArrowStorage` uses ``pyarrow.fs``; it works under Spark Connect, where
  the client has no JVM.

:func:`open_storage` picks one for a root. For reading tables rather than landing them,
:mod:`.location` gives a ``pyarrow.fs`` view of a directory (:func:`locate`), through
:mod:`.hadoop_arrow` when a Spark session's JVM is at hand.

Two operations carry the exactly-once protocol (docs/landing.md):

* ``create_exclusive`` is the commit point: of two landings creating the same manifest name,
  exactly one succeeds and the other gets :class:`FileExistsError`. Atomic on local file
  systems and HDFS; a check-then-rename on object stores (see docs/landing.md).
* ``move`` never replaces its target: two runs finishing the same batch's moves at once cannot
  delete each other's work.
"""

from __future__ import annotations

from typing import Any

from ...errors import ConfigError
from .arrow import ArrowStorage
from .base import FileInfo, Storage, is_tmp_name, tmp_name
from .hadoop import HadoopStorage
from .local import LocalStorage
from .location import Location, local_path, locate

__all__ = ["ArrowStorage", "FileInfo", "HadoopStorage", "LocalStorage", "Location", "Storage", "is_tmp_name",
           "local_path", "locate", "open_storage", "tmp_name"]


def open_storage(root: str, mode: str = "auto", spark: Any = None) -> Storage:
    """Storage for ``root``; ``mode`` is ``auto``, ``hadoop`` (needs a classic session) or ``arrow``.

    A ``file://`` root always gets :class:`LocalStorage`, whatever the mode: Hadoop's local file
    system neither syncs nor refuses to rename over an existing file, and pyarrow's local file
    system is the same system calls without the syncs.
    """
    if root.startswith("file:"):
        return LocalStorage(root)
    jvm = _jvm_of(spark) if mode != "arrow" else None
    if mode == "hadoop" and jvm is None:
        raise ConfigError("[landing] storage = 'hadoop' needs a classic SparkSession with a JVM, and this session "
                          "has none (Spark Connect, or no session); set storage = 'arrow' (or 'auto')", key="storage")
    if jvm is not None:
        return HadoopStorage(root, spark)
    return ArrowStorage(root)


def _jvm_of(spark: Any) -> Any:
    if spark is None:
        return None
    try:
        return spark._jvm
    except Exception:  # Spark Connect sessions raise on JVM attributes
        return None
