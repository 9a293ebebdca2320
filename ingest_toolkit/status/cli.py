"""``ingest-toolkit status``: the agent's live state on one screen, refreshed in place.

The agent is found as every client command finds it (:mod:`ingest_toolkit.collect.locate`): the
configuration's agent through its ports file (``--conf``, default ``conf/agent.toml``), unless
``--admin`` or ``--ports-file`` names another; its channels must be the configuration's.

On a terminal the screen is redrawn every ``--interval`` seconds (the terminal's alternate
screen, as ``top`` does) until ``q`` or Ctrl-C. A reading that fails keeps the last screen with
the reason in red and tries again, looking the agent up again (an agent restarted on a new
ephemeral port is found). ``--once`` (and any stdout that is not a terminal) prints one screen
after two readings ``--interval`` apart (the rates need two); ``--json`` prints the same rows as
a JSON document.
"""

from __future__ import annotations

import json
import os
import select
import sys
import termios
import time
import tty
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.live import Live

from ..cli_common import output_console, verbose_option
from ..collect.admin_client import AdminClient
from ..collect.errors import AdminRequestError
from ..collect.locate import AgentTarget, check_identity, find_agent, token_from_env
from .model import Reading, document
from .screen import render

__all__ = ["status_command"]


@click.command("status")
@click.option("--conf", "conf_path", type=click.Path(dir_okay=False, path_type=Path),
              help="The agent configuration whose agent to show (default: conf/agent.toml when it exists, else "
                   "the admin address 127.0.0.1:7432).")
@click.option("--admin", "admin", help="host:port of an agent's admin endpoint, instead of the configuration's.")
@click.option("--ports-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Or the ports file of a local agent (its admin port, host 127.0.0.1).")
@click.option("--token-env", help="Environment variable holding the admin token (default: the configuration's "
                                  "[agent.admin] security.token_env).")
@click.option("--tls-ca", type=click.Path(exists=True, dir_okay=False),
              help="CA (PEM) of an admin endpoint that serves HTTPS (default: the configuration's own certificate).")
@click.option("--interval", default=2.0, show_default=True, type=click.FloatRange(0.1, 3600),
              help="Seconds between readings.")
@click.option("--once", is_flag=True, help="Print one screen (after two readings, for the rates) and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as a JSON document (two readings) and exit.")
@verbose_option
def status_command(conf_path: Path | None, admin: str | None, ports_file: Path | None, token_env: str | None,
                   tls_ca: str | None, interval: float, once: bool, as_json: bool) -> None:
    """Show the agent live: per channel the backlog, oldest event, put/take rates, open takes,
    disk use and free space; forward sinks' state and lag; sources' state and errors."""
    if admin and ports_file:
        raise click.UsageError("give --admin or --ports-file, not both")
    watch = _Watch(conf_path, admin, ports_file, token_env, tls_ca)
    first = watch.read()  # a wrong or missing agent fails here, in one line
    if as_json or once or not sys.stdout.isatty():
        time.sleep(interval)
        second = watch.read()
        if as_json:
            click.echo(json.dumps(document(second, first, _agent_json(watch.target)), indent=2, default=str))
        else:
            output_console().print(render(watch.target.describe("admin"), second, first))
        return
    _live(watch, first, interval)


class _Watch:
    """Reads ``/status`` of the agent; a failed reading looks the agent up again before the next."""

    def __init__(self, conf: Path | None, admin: str | None, ports_file: Path | None, token_env: str | None,
                 tls_ca: str | None) -> None:
        self._conf, self._admin, self._ports_file = conf, admin, ports_file
        self._token_env, self._tls_ca = token_env, tls_ca
        self.target = self._find()

    def _find(self) -> AgentTarget:
        target = find_agent(self._conf, admin=self._admin, ports_file=self._ports_file, need="admin")
        if target.admin is None:
            raise AdminRequestError(f"{target.describe()} has no admin endpoint: enable its [agent.admin], or give "
                                    "--admin", url="", status=None, text="no admin endpoint")
        variable = self._token_env or target.token_env
        token = token_from_env(variable, "--token-env" if self._token_env else "[agent.admin] security.token_env")
        self._client = AdminClient(target.admin, token=token, tls_ca=self._tls_ca or target.tls_ca)
        return target

    def read(self) -> Reading:
        """One reading, checked against the configuration (WrongAgentError: not its agent)."""
        status = self._client.get("/status")
        channels = status.get("channels") or {}
        check_identity(self.target, lambda name: (channels.get(name) or {}).get("channel_id"))
        return Reading(time.monotonic(), status)

    def retry(self) -> Reading:
        self.target = self._find()
        return self.read()


def _agent_json(target: AgentTarget) -> dict[str, Any]:
    return {"name": target.name, "pid": target.pid, "admin": target.admin, "grpc": target.grpc, "found": target.how}


def _live(watch: _Watch, first: Reading, interval: float) -> None:
    """Redraw until q or Ctrl-C; a failed reading shows its reason and is tried again."""
    before, now, problem = None, first, None
    with Live(render(watch.target.describe("admin"), now, before, interval=interval), console=Console(),
              screen=True, auto_refresh=False) as live, _keys() as pressed, _interrupt_ends():
        while not pressed(interval):
            try:
                before, now, problem = now, watch.retry() if problem else watch.read(), None
            except (AdminRequestError, click.ClickException, OSError) as err:
                problem = str(err)
            except Exception as err:  # a lookup that fails while the agent restarts: shown, retried
                problem = f"{type(err).__name__}: {err}"
            live.update(render(watch.target.describe("admin"), now, before, problem=problem, interval=interval),
                        refresh=True)


@contextmanager
def _interrupt_ends() -> Iterator[None]:
    """Ctrl-C is how a live view is left: exit 0, no trace, no "Aborted!"."""
    try:
        yield
    except KeyboardInterrupt:
        pass


@contextmanager
def _keys() -> Iterator[Any]:
    """``pressed(timeout)``: wait up to ``timeout`` seconds; True when ``q`` was typed (or stdin is
    closed). The terminal is in cbreak mode meanwhile (keys arrive unbuffered, unechoed);
    Ctrl-C ends the command as always."""
    stdin = sys.stdin
    if not stdin.isatty():
        def wait(timeout: float) -> bool:
            time.sleep(timeout)
            return False

        yield wait
        return
    fd = stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def pressed(timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if select.select([fd], [], [], left)[0]:
                key = os.read(fd, 1)
                if key in (b"q", b"Q", b""):
                    return True
        return False

    try:
        yield pressed
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
