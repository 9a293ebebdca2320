"""gRPC's own log lines off for the command line: set before anything imports gRPC.

gRPC's C core writes log lines of its own to stderr, beside the command's one-line error: a port
it cannot bind (``E1129 ... add_port.cc:83] Failed to add port to server: ...``), preceded by
``WARNING: All log messages before absl::InitializeLog() are written to STDERR``, or a poller
that failed in a forked child (``ev_epoll1_linux.cc``). The toolkit turns every gRPC failure into
an error of its own that names the cause and the fix, so these lines only repeat it in another
form. gRPC reads ``GRPC_VERBOSITY`` once, when its C extension is imported: :mod:`ingest_toolkit.cli`
imports this module before any other of the toolkit, and it sets ``NONE`` unless the environment
chose a level or the command was given ``--verbose`` (which shows every trace).
"""

from __future__ import annotations

import os
import sys

__all__ = ["GRPC_QUIET"]


def _quiet_grpc() -> bool:
    """Set ``GRPC_VERBOSITY=NONE`` (see the module docstring); True when it was set here."""
    if "GRPC_VERBOSITY" in os.environ or {"--verbose", "-v"} & set(sys.argv[1:]):
        return False
    os.environ["GRPC_VERBOSITY"] = "NONE"
    return True


GRPC_QUIET: bool = _quiet_grpc()
"""Whether this process turned gRPC's own log lines off."""
