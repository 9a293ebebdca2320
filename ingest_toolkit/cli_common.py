"""What every ``ingest-toolkit`` command shares: one-line errors, and ``--verbose`` for the trace.

An error is one line that names the cause and the fix (exit code 1); the Python and Java trace
behind it is printed only with ``--verbose`` (and, for the agent, in its log). Commands in
several modules use this, so it is a module of its own (``cli`` imports those modules).
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console

from .errors import IngestError
from .extras import MissingExtraError, extra_for

__all__ = ["OneLineErrors", "is_verbose", "output_console", "stderr_is_terminal", "verbose_option"]

F = TypeVar("F", bound=Callable[..., Any])
_VERBOSE = "ingest_toolkit.verbose"
_PIPE_WIDTH = 10_000  # columns of output that is not a terminal: wide enough that nothing wraps


def _set_verbose(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[_VERBOSE] = True  # meta is shared by the whole context tree


def verbose_option(command: F) -> F:
    """``--verbose`` / ``-v``: on an error, the full trace (Python and Java) before the one-line
    message; for ``land``, Spark's own log on stderr too."""
    return click.option("--verbose", "-v", is_flag=True, expose_value=False, callback=_set_verbose,
                        help="On an error, print the full trace (and Spark's log) besides the one-line message.")(
        command)


def is_verbose() -> bool:
    """Whether the running command was given ``--verbose``."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(_VERBOSE))


class OneLineErrors(click.Group):
    """Shows toolkit errors, and OS errors (a directory it may not write, a full disk), as one
    clear line (exit code 1) that names the cause and the fix; the trace only with ``--verbose``."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except MissingExtraError as err:  # the line says it all: the extra to install
            raise click.ClickException(str(err)) from err
        except ModuleNotFoundError as err:  # a command importing a module of an extra when it runs
            missing = extra_for(err, ctx.invoked_subcommand or ctx.info_name or "this command")
            if missing is None:
                raise
            raise click.ClickException(str(missing)) from err
        except (IngestError, OSError) as err:
            verbose = bool(ctx.meta.get(_VERBOSE))
            if verbose:
                traceback.print_exception(err, file=sys.stderr)
            hint = " (--verbose shows the full trace)" if err.__cause__ is not None and not verbose else ""
            raise click.ClickException(f"{type(err).__name__}: {err}{hint}") from err


def output_console(*, stderr: bool = False) -> Console:
    """A console for tables and reports: the terminal's width on a terminal; without one (a pipe,
    a file, a CI log) a width no table reaches, so that no cell wraps and no name (a check, a
    step, a path) is broken in the middle, and each row stays one line for grep."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=_PIPE_WIDTH, soft_wrap=True)


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal that can redraw a line (not a pipe, a file, or TERM=dumb): where
    the commands show live progress instead of plain lines."""
    console = Console(stderr=True)
    return console.is_terminal and not console.is_dumb_terminal
