"""gRPC and ``fork`` + ``exec``: turn gRPC's fork handlers off before gRPC is imported.

Why: PySpark starts its JVM with ``subprocess.Popen(..., preexec_fn=...)``, a fork followed by an
exec. Once a process has used gRPC (a client channel, a server), gRPC's ``pthread_atfork`` child
handler restarts its event-engine poller thread in the forked child; ``Popen`` then closes the
child's inherited descriptors (``close_fds``), the poller's ``epoll_wait`` fails with EBADF
("epoll_wait error: Bad file descriptor") and gRPC aborts the child before it can exec, so
PySpark reports ``[JAVA_GATEWAY_EXITED]``. Measured here with grpcio 1.85: about 3 launches in
100 with a connected channel; upstream this is grpc/grpc#43055 (a regression since 1.80).

A process that only forks to exec needs none of gRPC's fork handling (gRPC's fork-support
document says so; ``GRPC_ENABLE_FORK_SUPPORT=false`` is the documented switch), and with the
handlers off the child does nothing but exec: 0 failures in 1,000 launches. gRPC reads
the variable when its C extension is imported, so this module sets it (unless the environment
already chose) before any module of the toolkit imports ``grpc``. It also starts the landing's
Spark session before its gRPC channel to the agent (:mod:`ingest_toolkit.land.run`), so a
process in which gRPC was imported earlier by something else is safe on the landing path too.

Fork *without* exec with live gRPC objects (``multiprocessing`` with the ``fork`` start method)
was never supported by gRPC Python's default and is not by the toolkit: use ``spawn``.
"""

from __future__ import annotations

import os
import sys

__all__ = ["FORK_HANDLERS_OFF", "ENV"]

ENV = "GRPC_ENABLE_FORK_SUPPORT"
_OFF = {"0", "false", "no", "off"}


def _turn_off() -> bool:
    """Set ``GRPC_ENABLE_FORK_SUPPORT=false`` unless it is set; True when gRPC's fork handlers are
    off in this process (the variable says so and gRPC's C extension was not imported before)."""
    loaded = "grpc._cython.cygrpc" in sys.modules
    os.environ.setdefault(ENV, "false")
    return not loaded and os.environ[ENV].strip().lower() in _OFF


FORK_HANDLERS_OFF: bool = _turn_off()
"""Whether forking (to exec) is safe while this process has live gRPC channels."""
