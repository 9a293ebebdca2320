"""Before the agent opens anything: can it write every directory it will write?

A read-only channel or state directory used to surface as a raw ``OSError`` traceback halfway
through the start (after other channels were opened and locked), while ``agent --check`` said
"configuration OK". :func:`directory_problems` tries each directory the agent writes the way it
will write it: it creates (and removes) a file in the directory, or, for one that does not exist
yet, in the nearest existing parent (the agent creates the rest). Read-only file systems,
immutable directories, permissions and a path through a regular file all show up, each as a
problem naming the setting.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .config import AgentConfig
from .sources.spool_settings import SpoolDirSettings

__all__ = ["directory_problems", "writable_problem"]


def directory_problems(config: AgentConfig) -> list[tuple[str, str]]:
    """``(setting, problem)`` for every directory of ``config`` the agent cannot write."""
    targets: list[tuple[str, Path]] = [("agent.state_dir", config.agent.state_dir),
                                       ("agent.ports_file", config.agent.ports_path.parent)]
    for name, channel in config.channels.items():
        targets.append((f"channels.{name}.checkpoint_dir", Path(channel.checkpoint_dir)))
        targets += [(f"channels.{name}.data_dirs", Path(d)) for d in channel.data_dirs]
        if channel.backup_checkpoint_dir:
            targets.append((f"channels.{name}.backup_checkpoint_dir", Path(channel.backup_checkpoint_dir)))
    for name, source in config.sources.items():
        if isinstance(source, SpoolDirSettings):  # completed files are renamed or deleted there
            targets.append((f"sources.{name}.dir", source.dir))
    problems, seen = [], set()
    for key, directory in targets:
        if os.path.realpath(directory) in seen:
            continue  # the ports file beside the state, say: one problem per directory
        seen.add(os.path.realpath(directory))
        problem = writable_problem(directory)
        if problem is not None:
            problems.append((key, f"{problem}; make it writable for the agent's user, or set {key} to a "
                                  "directory it can write"))
    return problems


def writable_problem(directory: Path) -> str | None:
    """Why the agent could not create files in ``directory`` (creating it first if needed), or
    None. Nothing is left behind: a probe file is created and removed at once."""
    existing = directory
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        return f"{directory} cannot be created: {existing} is not a directory"
    try:
        fd, probe = tempfile.mkstemp(prefix=".ingest-write-check-", dir=existing)
    except OSError as err:
        what = f"{directory}" if existing == directory else f"{directory} does not exist and its parent {existing}"
        return f"{what} is not writable ({err.strerror or err})"
    os.close(fd)
    os.unlink(probe)
    return None
