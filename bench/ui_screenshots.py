"""Screenshots of the Dagster UI on the demo's state, taken with headless Chromium.

Run after the demo (``.venv/bin/python -m dagster_defs.demo``), from the repository root::

    .venv/bin/pip install playwright          # the Python driver only; no browser download
    apt-get install chromium                  # or: .venv/bin/playwright install chromium
    .venv/bin/python bench/ui_screenshots.py [--out docs/img]

Boots ``dg dev`` on ``var/dagster`` (an ephemeral port on 127.0.0.1, its own process group,
stopped with SIGINT), opens the global asset graph and the check history of
``channel/events`` and ``landed/events`` in Chromium (``playwright`` driving the system's
``chromium`` when there is one, else playwright's own browser), and writes PNG files. Not run
in CI: it needs a browser.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]
# (file, path, text to wait for, tab to click before the screenshot)
PAGES = [
    ("asset-graph.png", "/assets/landed/events?view=lineage&lineageScope=neighbors", "text=Asset checks", None),
    ("channel-checks.png", "/assets/channel/events?view=checks&checkDetail=refcounts_match_recount",
     "text=events_recounted", None),
    ("check-history.png", "/assets/landed/events?view=checks&checkDetail=landed_reconciles", "text=landed_reconciles",
     "Execution history"),
    ("runs.png", "/runs", "text=check_events", None),
]


def _sigint_default() -> None:
    """In the child: SIGINT back to its default. A process started from a non-interactive shell's
    background job inherits SIGINT *ignored*, and `dg dev` would then never see our SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _boot(port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DAGSTER_HOME": str(REPO / "var" / "dagster")}
    with log.open("wb") as out:
        server = subprocess.Popen([str(Path(sys.executable).with_name("dg")), "dev", "-p", str(port), "-h",
                                   "127.0.0.1"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True, preexec_fn=_sigint_default)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"dg dev exited ({server.returncode}); see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2):
                return server
        except OSError:
            time.sleep(0.5)
    _stop(server)
    raise SystemExit(f"dg dev did not start in 120 s; see {log}")


def _stop(server: subprocess.Popen[bytes]) -> None:
    os.killpg(server.pid, signal.SIGINT)
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def _shoot(port: int, out: Path) -> list[Path]:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    written = []
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        for name, path, ready, tab in PAGES:
            started = time.monotonic()
            page.goto(f"http://127.0.0.1:{port}{path}", wait_until="networkidle", timeout=60_000)
            _dismiss_welcome(page)
            if tab:
                page.get_by_text(tab, exact=True).first.click()
            try:
                page.wait_for_selector(ready, timeout=30_000)
            except PlaywrightTimeout:
                print(f"{name}: '{ready}' did not appear; the screenshot shows what did")
            page.wait_for_timeout(2000)  # let the graph layout settle
            page.screenshot(path=str(out / name))
            written.append(out / name)
            print(f"{out / name}  ({time.monotonic() - started:.1f} s)")
        browser.close()
    return written


def _dismiss_welcome(page: object) -> None:
    """The first visit shows a 'Join the community' dialog: skip it."""
    skip = page.get_by_role("button", name="Skip")  # type: ignore[attr-defined]
    try:
        skip.click(timeout=3000)
    except Exception:  # noqa: BLE001 - no dialog this time
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Screenshots of the Dagster UI (asset graph, check history)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    args = parser.parse_args(argv)
    if not (REPO / "var" / "dagster" / "dagster.yaml").exists():
        raise SystemExit("no var/dagster: run `.venv/bin/python -m dagster_defs.demo` first")
    args.out.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    server = _boot(port, REPO / "var" / "ui-screenshots.log")
    try:
        _shoot(port, args.out)
    finally:
        _stop(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
