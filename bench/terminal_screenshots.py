"""Screenshots of the terminal screens: ``ingest-toolkit status`` and ``land --drain`` in progress.

Run from the repository root (with the ``[dev]`` extra, Java 17 for the landing's Spark, ``tmux``
on the PATH, and Pillow for the PNG files)::

    .venv/bin/pip install pillow
    .venv/bin/python bench/terminal_screenshots.py [--out docs/img] [--events 300000]

It makes a deployment of its own in a new temporary directory (``ingest-toolkit init``, its
agent on ephemeral ports set in ``conf/agent.toml``), sends ``--events`` events, and runs each
command as a user would, in a real terminal: a tmux session of its own (its own server socket,
a fixed 132x34 size). The screen is read back with ``tmux capture-pane -e`` (the characters and
their colours as the terminal holds them), parsed by rich (``Text.from_ansi``) and drawn cell by
cell in DejaVu Sans Mono with Pillow, so the picture is the terminal's real content:

* ``status.png``: ``ingest-toolkit status`` while a sender keeps putting events (the rates are
  not zero) and the forward sink of the second channel ``audit`` fails (its aggregator is not
  running: the sink's state, lag and last error), taken once its screen shows both;
* ``land-drain.png``: ``ingest-toolkit land --channel events --drain`` (plain Parquet, Spark),
  taken once the first batch has landed while later ones are still in flight.

Each waits for what proves its picture (up to 10 minutes); without it no picture is written and
the script exits with code 1. At the end it stops its agent and its tmux server and deletes its
temporary directory (nothing else). Not run in CI: it needs tmux and a font.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "ingest_toolkit.cli"]
COLUMNS, ROWS = 132, 34
FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf")
FONT_BOLD = Path("/usr/share/fonts/truetype/dejavu/DejaVuSansMono-Bold.ttf")
FONT_BRAILLE = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
WAIT = 600.0
BACKGROUND, FOREGROUND = (24, 24, 27), (212, 212, 216)
ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("INGEST_")}, "TERM": "xterm-256color"}


# A second channel, forwarded to an aggregator that is down: the status screen's sinks table.
FORWARDED = """
[channels.audit]
checkpoint_dir = "var/channels/audit/checkpoint"
data_dirs = ["var/channels/audit/data"]
min_free_bytes = 104_857_600

[sinks.archive]
type = "forward"
channel = "audit"
address = "127.0.0.1:{port}"
downstream_channel = "audit"
"""


class Deployment:
    """``ingest-toolkit init`` in ``root``, its agent on ephemeral ports, and a channel ``audit``
    forwarded to an aggregator address where nothing listens."""

    def __init__(self, root: Path) -> None:
        subprocess.run([*CLI, "init", str(root)], check=True, capture_output=True, env=ENV)
        conf = root / "conf" / "agent.toml"
        text = conf.read_text().replace("port = 7431 ", "port = 0    ").replace("port = 7432", "port = 0")
        conf.write_text(text + FORWARDED.format(port=_closed_port()))
        self.root = root
        self.agent: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.root / "agent.log").open("wb")
        self.agent = subprocess.Popen([*CLI, "agent"], cwd=self.root, stdout=log, stderr=subprocess.STDOUT, env=ENV)
        ports = self.root / "var" / "agent" / "ports.json"
        _wait(lambda: ports.exists() and json.loads(ports.read_text()).get("pid") == self.agent.pid,  # type: ignore[union-attr]
              "the agent's ports file", 120)

    def send(self, events: int, channel: str = "events") -> None:
        lines = "".join(f'{{"n": {i}, "user": "u{i % 97}", "action": "view"}}\n' for i in range(events))
        subprocess.run([*CLI, "send", "--channel", channel], cwd=self.root, input=lines.encode(), check=True,
                       capture_output=True, env=ENV)

    def stop(self) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGTERM)
            self.agent.wait(60)


class Terminal:
    """A tmux server of our own (socket ``ingest-shots-<pid>-<name>``) with one window of COLUMNS x ROWS."""

    def __init__(self, name: str) -> None:
        self.socket = f"ingest-shots-{os.getpid()}-{name}"

    def run(self, command: list[str], cwd: Path) -> None:
        shell = " ".join(_quote(part) for part in command) + "; sleep 600"  # keep the last screen to read
        self._tmux("new-session", "-d", "-s", "shot", "-x", str(COLUMNS), "-y", str(ROWS), "-c", str(cwd), shell)

    def screen(self) -> str:
        """The visible screen, with its colours as escape sequences."""
        return self._tmux("capture-pane", "-e", "-p", "-t", "shot")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True,
                              env={**ENV, "PATH": f"{Path(sys.executable).parent}:{ENV.get('PATH', '')}"})
        if done.returncode != 0:
            raise SystemExit(f"tmux {' '.join(args[:2])} failed: {done.stderr.strip()}")
        return done.stdout


def _closed_port() -> int:
    """A port of 127.0.0.1 that was free a moment ago: an aggregator that is not running."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _quote(part: str) -> str:
    return part if re.fullmatch(r"[\w./:=-]+", part) else "'" + part.replace("'", "'\\''") + "'"


def _wait(ready: Callable[[], object], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"no {what} within {timeout:.0f} s")


def shoot(terminal: Terminal, ready: Callable[[str], bool], what: str, out: Path) -> None:
    """Wait until the screen shows ``ready``, then draw it into ``out`` (PNG)."""
    captured: list[str] = []

    def seen() -> bool:
        captured[:] = [terminal.screen()]
        return ready(_plain(captured[0]))

    try:
        _wait(seen, what)
    except TimeoutError:
        print(_plain(captured[0]) if captured else "(nothing captured)")
        raise
    draw(captured[0], out)
    print(f"wrote {out}")


def _plain(screen: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen)


def draw(screen: str, out: Path) -> None:
    """The captured screen, cell by cell, in its colours (rich parses the escape sequences)."""
    from PIL import Image, ImageDraw, ImageFont
    from rich.console import Console
    from rich.text import Text

    console = Console()
    font, bold = ImageFont.truetype(str(FONT), 15), ImageFont.truetype(str(FONT_BOLD), 15)
    braille = ImageFont.truetype(str(FONT_BRAILLE), 15)  # the spinner's glyphs: not in the monospaced font
    cell_w, cell_h, pad = font.getlength("M"), 18, 16  # the font's own advance: box lines join
    image = Image.new("RGB", (round(COLUMNS * cell_w) + 2 * pad, ROWS * cell_h + 2 * pad), BACKGROUND)
    pen = ImageDraw.Draw(image)
    # the whole screen at once: tmux writes a colour once, and it holds across line ends
    for row, text in enumerate(Text.from_ansi(screen.rstrip("\n")).split("\n")[:ROWS]):
        for column, char in enumerate(text.plain[:COLUMNS]):
            style = text.get_style_at_offset(console, column)
            x, y = pad + column * cell_w, pad + row * cell_h
            if style.bgcolor is not None and not style.bgcolor.is_default:
                pen.rectangle([x, y, x + cell_w, y + cell_h], fill=tuple(style.bgcolor.get_truecolor()))
            face = braille if "\u2800" <= char <= "\u28ff" else bold if style.bold else font
            pen.text((x, y), char, font=face, fill=_foreground(style))
    out.parent.mkdir(parents=True, exist_ok=True)
    image.save(out)


def _foreground(style: Any) -> tuple[int, int, int]:
    """A cell's colour: its own (the terminal's default: light grey), halved toward the background when dim."""
    color = FOREGROUND if style.color is None or style.color.is_default else tuple(style.color.get_truecolor())
    if style.dim:
        color = tuple((c + b) // 2 for c, b in zip(color, BACKGROUND, strict=True))
    return color  # type: ignore[return-value]


def status_shot(deployment: Deployment, out: Path) -> None:
    """``status`` while a sender keeps putting events: the put rate is not zero."""
    sender = subprocess.Popen([sys.executable, "-c", _KEEP_SENDING], cwd=deployment.root, env=ENV)
    terminal = Terminal("status")
    try:
        terminal.run([*CLI, "status", "--interval", "1"], deployment.root)
        shoot(terminal, lambda s: re.search(r"events\s*│\s*[\d,]+\s*│\s*\S+\s*│\s*[1-9][\d,]*\s*│", s) is not None
              and ("penalised" in s or "failing" in s), "status screen with a put rate and the sink's state", out)
    finally:
        terminal.close()
        sender.terminate()
        sender.wait(60)


# a sender of 200 events every half second, until terminated
_KEEP_SENDING = """
import subprocess, sys, time
n = 0
while True:
    lines = "".join(f'{{"n": {i}, "user": "u{i % 97}", "action": "click"}}\\n' for i in range(n, n + 200))
    subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", "send", "--channel", "events"],
                   input=lines.encode(), capture_output=True)
    n += 200
    time.sleep(0.5)
"""


def land_shot(deployment: Deployment, out: Path, max_events: int) -> None:
    """``land --drain`` after its first batch landed, with later batches in flight."""
    terminal = Terminal("land")
    try:
        terminal.run([*CLI, "land", "--channel", "events", "--drain", "--max-events", str(max_events)],
                     deployment.root)
        shoot(terminal, lambda s: re.search(r"batch \d+: landed", s) is not None and re.search(r"batch(es)? done", s)
              is not None and re.search(r"batch \d+: (taking|building|writing|checking|committing)", s) is not None,
              "landing screen with a batch landed and the footer of the batches in flight", out)
    finally:
        terminal.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    parser.add_argument("--events", type=int, default=300_000)
    args = parser.parse_args(argv)
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is not on the PATH: apt-get install tmux")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a SIGTERM still stops the agent and tmux below
    root = Path(tempfile.mkdtemp(prefix="ingest-shots-"))
    deployment = Deployment(root / "ingest")
    failed = False
    try:
        deployment.start()
        deployment.send(args.events)
        deployment.send(5_000, channel="audit")
        for name, step in (("status.png", lambda: status_shot(deployment, args.out / "status.png")),
                           ("land-drain.png", lambda: land_shot(deployment, args.out / "land-drain.png",
                                                                max(1, args.events // 4)))):
            try:
                step()
            except TimeoutError as err:
                print(f"{name}: {err}; no picture written")
                failed = True
    finally:
        deployment.stop()
        shutil.rmtree(root)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
