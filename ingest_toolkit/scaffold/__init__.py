"""``ingest-toolkit init [DIR]``: a working starting point in a directory of one's own.

It writes the shipped configuration (``conf/agent.toml``, ``conf/landing.toml``,
``conf/dagster.toml`` and ``conf/dagster.yaml``, the files of the repository's ``conf/``, copied
into this package and kept identical to them by a test), the Dagster instance file
``var/dagster/dagster.yaml`` (``DAGSTER_HOME``: one run per pool), and the directories those
files name, all relative to DIR. Every path in them is relative to DIR, so each command's
default (``--conf conf/agent.toml``, ``conf/landing.toml``) works when run from there.

It also writes an empty Dagster project (``dg.toml`` and the package ``orchestration`` with its
``defs/`` folder, :data:`PROJECT_FILES`): with the ``[dagster]`` extra, ``dg scaffold defs
ingest_toolkit.dagster.IngestChannelComponent events`` adds the channel's instance to it and
``dg dev`` serves it, from DIR.

It also writes a ``.gitignore`` (``var/``, the virtualenv, caches) and a ``pyproject.toml`` naming
the toolkit with the extra the deployment uses, so DIR can be a repository of its own.

It overwrites nothing: when any file it would write exists, it stops with one line naming it
and writes nothing at all.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import click

from ..manual import docs_dir
from .source import install_command

__all__ = ["PROJECT_FILES", "SCAFFOLD_FILES", "Scaffold", "init_command", "plan_scaffold", "write_scaffold"]

# Target (relative to DIR) -> the shipped file it is written from (this package's conf/).
SCAFFOLD_FILES: dict[str, str] = {
    "conf/agent.toml": "agent.toml",
    "conf/landing.toml": "landing.toml",
    "conf/dagster.toml": "dagster.toml",
    "conf/dagster.yaml": "dagster.yaml",
    "var/dagster/dagster.yaml": "dagster.yaml",  # the instance: DAGSTER_HOME=$PWD/var/dagster
}
# The Dagster project (target -> content): no instance yet; `dg scaffold defs` adds one per channel.
PROJECT_FILES: dict[str, str] = {
    "dg.toml": """\
# The Dagster project of this directory, for `dg` (the [dagster] extra: pyproject.toml says how). Its
# definitions are the component instances under orchestration/defs/, one per channel:
#   dg scaffold defs ingest_toolkit.dagster.IngestChannelComponent events   (writes its defs.yaml)
#   dg check defs                                                           (validates them)
#   DAGSTER_HOME=$PWD/var/dagster dg dev                                    (the UI)
directory_type = "project"

[project]
root_module = "orchestration"
code_location_name = "ingest"
""",
    "orchestration/__init__.py": '"""The Dagster project of this directory (dg.toml)."""\n',
    "orchestration/definitions.py": """\
\"\"\"The code location: every component instance under defs/ (one per channel).\"\"\"

from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
""",
    "orchestration/defs/__init__.py": "",
    ".gitignore": """\
# What runs here writes under var/ (channels, spool, landed and curated tables, the Dagster instance's
# runs and logs): state, not source. The virtualenv and Python's caches neither.
/var/
.venv/
__pycache__/
*.pyc
.dagster/
.tmp_dagster_home_*/
.pytest_cache/
.ruff_cache/
.mypy_cache/
""",
}
# The deployment's own package (its Dagster project), naming the toolkit and the extras it uses.
_PYPROJECT = """\
# This deployment: the Dagster project under orchestration/ and the toolkit it runs on.
# ingest-toolkit is not on a package index: install it first from its wheel or checkout, e.g.
#   {install}
# then `pip install -e .` here (pip finds ingest-toolkit {version} installed). An edge host that only runs
# the agent needs the core alone (no extra); the landing needs [spark], Dagster [dagster].
[project]
name = "ingest-deployment"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = ["ingest-toolkit[dagster]=={version}"]

[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[tool.setuptools]
packages = ["orchestration", "orchestration.defs"]
"""
_HEADER = ("# Written by `ingest-toolkit init` (ingest-toolkit {version}). Paths are relative to the directory "
           "holding conf/:\n# run every command from there. docs/<name>.md below is the documentation installed "
           "with the toolkit:\n# {docs}\n")


@dataclass(frozen=True, kw_only=True)
class Scaffold:
    """What ``init`` writes under ``root``: file contents and directories, by relative path."""

    root: Path
    files: dict[str, str]
    directories: list[str]


def _template(name: str) -> str:
    return resources.files(__package__).joinpath("conf", name).read_text(encoding="utf-8")


def _package_version() -> str:
    try:
        return version("ingest-toolkit")
    except PackageNotFoundError:  # pragma: no cover - running from a checkout that was never installed
        return "unknown"


_INSTANCE_INTRO = """\
# The Dagster *instance* configuration (Dagster's own dagster.yaml): one run at a time per pool
# (landing-<channel>, curated-<channel>). Dagster reads it only as $DAGSTER_HOME/dagster.yaml, so
# var/dagster/dagster.yaml is the instance (DAGSTER_HOME=$PWD/var/dagster) and conf/dagster.yaml
# the same file kept beside the other settings. No storage section: SQLite files in $DAGSTER_HOME;
# production adds its storage (e.g. `storage: postgres: ...`) and keeps the concurrency section.
"""


def _render(name: str, text: str) -> str:
    """The shipped file with a header saying where it came from. In its comments "the repository
    root" is the directory holding conf/; the instance file's introduction (how the repository
    copies it) is replaced by what holds here."""
    body = text.replace("from the repository root", "from the directory holding conf/")
    if name == "dagster.yaml":
        lines = body.splitlines(keepends=True)
        first = next(i for i, line in enumerate(lines) if not line.startswith("#"))
        body = _INSTANCE_INTRO + "".join(lines[first:])
    docs = docs_dir()
    where = f"{docs}/<name>.md (`ingest-toolkit docs` lists them)" if docs else "`ingest-toolkit docs` says where"
    return _HEADER.format(version=_package_version(), docs=where) + body


def _local(path: str) -> str | None:
    """``path`` as a local relative path, or None for a URI (hdfs://, s3a://) or an absolute path."""
    if "://" in path or Path(path).is_absolute():
        return None
    return str(Path(path))


def _named_directories(files: dict[str, str]) -> list[str]:
    """Every local directory the generated configuration names (agent state, ports file's
    directory, channel directories, spool directories, landing and curated roots, the instance)."""
    agent = tomllib.loads(files["conf/agent.toml"])
    landing = tomllib.loads(files["conf/landing.toml"]).get("landing", {})
    dagster = tomllib.loads(files["conf/dagster.toml"]).get("dagster", {})
    named: list[str] = [agent.get("agent", {}).get("state_dir", "var/agent")]
    if ports_file := agent.get("agent", {}).get("ports_file"):
        named.append(str(Path(ports_file).parent))
    for channel in agent.get("channels", {}).values():
        named += [channel["checkpoint_dir"], *channel["data_dirs"]]
    named += [source["dir"] for source in agent.get("sources", {}).values() if source.get("type") == "spool_dir"]
    named += [landing.get("root", "var/landing"), dagster.get("curated_root", "var/curated"), "var/dagster"]
    local = (_local(path) for path in named)
    return list(dict.fromkeys(path for path in local if path is not None and path != "."))


def plan_scaffold(root: Path) -> Scaffold:
    """The files and directories ``init`` writes under ``root`` (nothing is written)."""
    files = {target: _render(source, _template(source)) for target, source in SCAFFOLD_FILES.items()}
    files.update(PROJECT_FILES)
    files["pyproject.toml"] = _PYPROJECT.format(install=install_command("dagster"), version=_package_version())
    return Scaffold(root=root, files=files, directories=_named_directories(files))


def _conflict(scaffold: Scaffold) -> str | None:
    """The first path that would be overwritten (a file to write that exists, or a directory to
    create that exists as something else); None when the scaffold fits."""
    for relative in scaffold.files:
        if (path := scaffold.root / relative).exists() or path.is_symlink():
            return f"{path} exists"
    for relative in [*scaffold.directories, *(str(Path(f).parent) for f in scaffold.files)]:
        for parent in [scaffold.root / relative, *(scaffold.root / relative).parents]:
            if parent.exists() and not parent.is_dir():
                return f"{parent} exists and is not a directory"
    return None


def write_scaffold(scaffold: Scaffold) -> None:
    """Create the directories and the files; a file that appeared meanwhile is not overwritten
    (exclusive create), and the error names it."""
    if (conflict := _conflict(scaffold)) is not None:
        raise click.ClickException(f"{conflict}: init overwrites nothing, so it wrote nothing; give it an empty "
                                   "directory (ingest-toolkit init DIR) or move that file away")
    for relative in [*scaffold.directories, *(str(Path(f).parent) for f in scaffold.files)]:
        (scaffold.root / relative).mkdir(parents=True, exist_ok=True)
    for relative, text in scaffold.files.items():
        with open(scaffold.root / relative, "x", encoding="utf-8") as out:
            out.write(text)


def _next_steps(root: Path) -> list[str]:
    """The commands to run next, each with what it does. The ``pip install`` lines name the wheel or
    checkout this installation came from (the package is on no index: :mod:`.source`)."""
    here = [] if root.resolve() == Path.cwd().resolve() else [("cd " + str(root), "")]
    steps = [*here,
             ("ingest-toolkit agent --conf conf/agent.toml &", "the agent: gRPC 127.0.0.1:7431, until SIGTERM"),
             ("seq 1 1000 | ingest-toolkit send --channel events", "to the agent of conf/agent.toml"),
             ("ingest-toolkit status", "the agent live (q quits)"),
             ("ingest-toolkit channel inspect --channel events", "what the channel holds"),
             (install_command("spark"), "the landing runs Spark (Java 17 on the PATH)"),
             ("ingest-toolkit land --channel events --drain", "Parquet under var/landing/events"),
             (install_command("dagster"), "or land through Dagster, a component per channel:"),
             ("dg scaffold defs ingest_toolkit.dagster.IngestChannelComponent events", ""),
             ("DAGSTER_HOME=$PWD/var/dagster dg dev", "the UI: sensors, schedule, checks"),
             ("kill %1", "stop the agent (SIGTERM)"),
             ("ingest-toolkit docs", "where the documentation is")]
    return [f"{command:<50} # {what}" if what else command for command, what in steps]


@click.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path), default=Path("."))
def init_command(directory: Path) -> None:
    """Write a starting point in DIRECTORY (default: here): conf/ (agent, landing, Dagster
    settings), the Dagster instance file and the directories they name. Overwrites nothing."""
    scaffold = plan_scaffold(directory)
    write_scaffold(scaffold)
    click.echo(f"wrote {', '.join(scaffold.files)} and the directories {', '.join(scaffold.directories)} "
               f"in {directory}")
    click.echo("next:")
    for line in _next_steps(directory):
        click.echo(f"  {line}")
