"""Which optional extra a missing module belongs to, and the one-line error that names it.

``pip install ingest-toolkit`` is the core an edge host needs (channel, agent, collectors, CLI,
gRPC client, channel tools). Spark, Arrow, the table formats, Dagster and Airflow come with
extras (``[spark]``, ``[tables]``, ``[dagster]``, ``[airflow]``, ``[connect]``, ``[all]``;
docs/install.md). The core never imports them at module level; a command that needs one imports
it when it runs, and a missing one becomes :class:`MissingExtraError` ("land needs Spark: pip
install 'ingest-toolkit[spark]'") instead of a traceback.
"""

from __future__ import annotations

from .errors import IngestError

__all__ = ["EXTRA_OF_MODULE", "MissingExtraError", "extra_for", "require"]

# Top-level module -> (extra, what it is). Only modules the core does not install.
EXTRA_OF_MODULE: dict[str, tuple[str, str]] = {
    "pyspark": ("spark", "Spark"),
    "py4j": ("spark", "Spark"),
    "pyarrow": ("spark", "Spark"),
    "numpy": ("spark", "Spark"),
    "pandas": ("connect", "the Spark Connect client"),
    "dagster": ("dagster", "Dagster"),
    "dagster_webserver": ("dagster", "Dagster"),
    "dagster_dg_cli": ("dagster", "Dagster"),
    "pendulum": ("dagster", "Dagster"),
    "tomlkit": ("dagster", "Dagster"),
    "airflow": ("airflow", "Airflow"),
    "deltalake": ("tables", "the Delta Lake writer (delta-rs)"),
    "pyiceberg": ("tables", "the Iceberg writer (PyIceberg)"),
    "hdfs_native": ("tables", "the HDFS client of the table writers"),
}


class MissingExtraError(IngestError):
    """A command needs a module of an extra that is not installed; the message names the extra."""

    def __init__(self, command: str, module: str, extra: str, what: str) -> None:
        super().__init__(f"{command} needs {what}: pip install 'ingest-toolkit[{extra}]'")
        self.command, self.module, self.extra = command, module, extra


def extra_for(err: ImportError, command: str) -> MissingExtraError | None:
    """The :class:`MissingExtraError` for ``err`` when the module it misses belongs to an extra,
    else None (a broken install of a core dependency stays a real error)."""
    name = getattr(err, "name", None) or ""
    top = name.partition(".")[0]
    if not isinstance(err, ModuleNotFoundError) or top not in EXTRA_OF_MODULE:
        return None
    extra, what = EXTRA_OF_MODULE[top]
    return MissingExtraError(command, top, extra, what)


def require(module: str, command: str, extra: str) -> None:
    """Raise :class:`MissingExtraError` now when ``module`` (of ``extra``) is not installed."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        what = EXTRA_OF_MODULE.get(module, (extra, module))[1]
        raise MissingExtraError(command, module, extra, what)
