"""The curated tables' hourly partitions, starting where the data starts.

A fixed, early ``partitions_start`` (it used to be ``2026-01-01-00:00``) made the UI show
thousands of hours, all "missing" but the few with data, and offered them all in the backfill
dialog. The default is now ``partitions_start = "auto"``: the first partition is the hour of the
earliest landed data of the channel (its oldest landed hour, in any table format), so no hour
before the data is a partition the UI lists as missing (the lookback reaching back before it
did: three days of "missing" hours before a first deployment's first landed hour). While nothing
has landed, it is the start of the day ``partitions_lookback_days`` (default 3) before today in
the partitions' time zone, so that a first deployment's recent history is curatable when it lands
after the definitions loaded. It is decided when the definitions load (the code server, and every
run, which loads them again), so it follows the data when the code location reloads; a landed
hour before it (late data older than everything landed before) is named in the curated sensor's
skip reason and fails the ERROR check ``curated_covers_landed`` (hours, events, the start that
covers them) until then. A date (``2026-11-01-00:00``) fixes the start instead, as a production
deployment whose history is known would set it.

Time-window partitions (rather than dynamic ones added as data lands) keep what the time gives:
every key is an hour that maps to a UTC window (half-hour zones and DST days included, see
:mod:`ingest_toolkit.dagster.curated`), backfills select a time range, and an hour without data is an
(empty) partition anyone can build.
"""

from __future__ import annotations

import logging
import re

import dagster as dg
import pendulum

from ingest_toolkit.land.config import LandingConfig
from ingest_toolkit.land.storage import Location, local_path, locate
from ingest_toolkit.orchestrate.settings import ChannelSpec, OrchestrationSettings

__all__ = ["AUTO", "channel_partitions", "earliest_landed_hour", "hourly_partitions", "resolve_start"]

AUTO = "auto"
_FORMAT = "YYYY-MM-DD-HH:mm"
_DAY = re.compile(r"^event_date=(\d{4}-\d{2}-\d{2})$")
_HOUR = re.compile(r"^event_hour=(\d{1,2})$")

log = logging.getLogger(__name__)


def earliest_landed_hour(table: Location) -> pendulum.DateTime | None:
    """The UTC hour of the oldest ``event_date=D/event_hour=H`` directory of a landed table."""
    for day in sorted(m.group(1) for name in table.subdirs() if (m := _DAY.match(name))):
        hours = [int(m.group(1)) for name in table.child(f"event_date={day}").subdirs() if (m := _HOUR.match(name))]
        hours = [h for h in hours if h <= 23]
        if hours:
            start = pendulum.parse(day, tz="UTC")
            assert isinstance(start, pendulum.DateTime)
            return start.add(hours=min(hours))
    return None


def resolve_start(settings: OrchestrationSettings, landed: Location | None = None,
                  now: pendulum.DateTime | None = None, *, earliest: pendulum.DateTime | None = None) -> str:
    """``partitions_start`` as a key: the configured date, or for ``auto`` the earliest landed hour
    of ``landed``, or while nothing landed the start of the day ``partitions_lookback_days``
    before today, in ``settings.timezone`` (``earliest``: the landed table's earliest hour, when
    it was read otherwise)."""
    if settings.partitions_start != AUTO:
        return settings.partitions_start
    today = (now or pendulum.now(settings.timezone)).in_timezone(settings.timezone).start_of("day")
    floor = today.subtract(days=settings.partitions_lookback_days)
    if landed is not None and earliest is None:
        try:
            earliest = earliest_landed_hour(landed)
        except OSError as err:  # an unreachable landing root must not stop the definitions from loading
            log.warning("partitions_start = auto: cannot list %s (%s); starting at %s", landed.uri, err, floor)
    start = floor if earliest is None else earliest.in_timezone(settings.timezone).start_of("hour")
    return start.format(_FORMAT)


def hourly_partitions(settings: OrchestrationSettings, start: str | None = None) -> dg.HourlyPartitionsDefinition:
    """Hourly partitions in ``settings.timezone`` from ``start`` (default: ``partitions_start``,
    ``auto`` without data: ``partitions_lookback_days`` before today); the hour in progress is
    included (``end_offset=1``) so that fresh data can be curated before the hour ends
    (re-running it later replaces it)."""
    return dg.HourlyPartitionsDefinition(start_date=start or resolve_start(settings), timezone=settings.timezone,
                                         end_offset=1)


def channel_partitions(spec: ChannelSpec, settings: OrchestrationSettings,
                       landing_root: str | None = None) -> dg.HourlyPartitionsDefinition:
    """The partitions of the curated table of ``spec``: ``auto`` looks at its landed table (under
    ``landing_root``, default the landing root of ``landing_conf``, environment overrides applied)."""
    if settings.partitions_start != AUTO:
        return hourly_partitions(settings)
    from ingest_toolkit.errors import ConfigError
    from ingest_toolkit.land.config import load_landing_config

    try:
        overrides = {"root": landing_root} if landing_root else {}
        config = load_landing_config(settings.landing_conf, **overrides)
    except (ConfigError, OSError, ValueError) as err:  # the landing run reports it; the definitions still load
        log.warning("partitions_start = auto: %s; starting %d days back", err, settings.partitions_lookback_days)
        return hourly_partitions(settings, resolve_start(settings))
    if config.format != "parquet":
        return hourly_partitions(settings, _start_from_table(settings, config, spec.name))
    root = config.root
    if local_path(root) is None:
        # Listing hdfs:// or s3a:// needs a JVM (Spark's Hadoop client): too heavy for loading the
        # definitions, so a remote Parquet root starts at the lookback unless partitions_start names a date.
        log.info("partitions_start = auto reads only local Parquet landing roots; %s: starting %d days back "
                 "(set [dagster] partitions_start to the first day of your data to backfill earlier hours)", root,
                 settings.partitions_lookback_days)
        return hourly_partitions(settings, resolve_start(settings))
    landed: Location | None = locate(root).child(spec.name)
    return hourly_partitions(settings, resolve_start(settings, landed))


def _start_from_table(settings: OrchestrationSettings, config: LandingConfig, channel: str) -> str:
    """``auto`` for a Delta or Iceberg landed table: its earliest hour from the table's metadata
    (the libraries read local, HDFS and S3 tables alike, without a JVM)."""
    from ingest_toolkit.curate.source import landed_source

    try:
        hours = landed_source(config, channel).hours(counts=False)
    except Exception as err:  # noqa: BLE001 - an unreadable table must not stop the definitions from loading
        log.warning("partitions_start = auto: cannot read the landed %s table of %s (%s); starting %d days back",
                    config.format, channel, err, settings.partitions_lookback_days)
        return resolve_start(settings)
    earliest = min((entry.hour for entry in hours.values()), default=None)
    return resolve_start(settings, earliest=earliest)
