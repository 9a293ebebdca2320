"""``ingest-toolkit status``: a live view of one agent, one screen refreshed in place (like
``vector top``), read from the agent's admin endpoint (``GET /status``).

* :mod:`.sample`: two readings of ``/status`` make the rates (put/take and forwarded events per
  second, from the lifetime counters);
* :mod:`.screen`: the screen as rich renderables: per channel the backlog, the age of its oldest
  event, put and take rates, open takes, disk use and free space; per forward sink its state and
  lag (the backlog of the channel it empties); per source its state and errors;
* :mod:`.cli`: the command: finds the agent as every client command does
  (:mod:`ingest_toolkit.collect.locate`), refreshes until ``q`` or Ctrl-C, or prints one screen
  (``--once``, and whenever stdout is not a terminal) or a JSON document (``--json``).

Core only: no Spark, no Dagster.
"""

from __future__ import annotations

from .cli import status_command

__all__ = ["status_command"]
