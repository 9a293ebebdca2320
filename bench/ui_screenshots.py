"""Screenshots of the Dagster UI on the demo's state, taken with headless Chromium.

Run after the demo (``.venv/bin/python -m dagster_defs.demo``), from the repository root::

    .venv/bin/pip install playwright          # the Python driver only; no browser download
    apt-get install chromium                  # or: .venv/bin/playwright install chromium
    .venv/bin/python bench/ui_screenshots.py [--out docs/img]

First records one failing check, as on-call would meet it: ``checkpoint_fresh`` of
``events_channel`` evaluated with ``INGEST_LANDING__AGENT`` set while no agent runs (the check then
reports that the agent serving the channel is down). Then boots ``dg dev`` on ``var/demo/dagster`` (an
ephemeral port on 127.0.0.1, its own process group, stopped with SIGINT) and photographs in
Chromium (``playwright`` driving the system's ``chromium`` when there is one, else playwright's
own browser):

* ``asset-graph.png``: the lineage around ``events_landed`` (its neighbours: the channel
  upstream, the curated table downstream; with one channel, the whole graph);
* ``channel-checks.png``: the metadata of ``refcounts_match_recount``;
* ``check-history.png``: the execution history of ``landed_reconciles``;
* ``check-failing.png``: the failing ``checkpoint_fresh``;
* ``runs.png``: the runs list.

Every page waits for an element that proves it shows what its picture is for; if one does not
appear (or a tab to click is missing) no picture is written for it and the script exits with
code 1. Not run in CI: it needs a browser.
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
DEMO = REPO / "var" / "demo"  # the tree the demo leaves (its conf, instance, data)
# (file, path, elements that must all appear, tab to click before them)
PAGES = [
    ("asset-graph.png", "/assets/events_landed?view=lineage&lineageScope=neighbors",
     ("text=Nearest Neighbors", 'text="channels"', 'text="landing"', 'text="curated"', "text=Asset checks"), None),
    ("channel-checks.png", "/assets/events_channel?view=checks&checkDetail=refcounts_match_recount",
     ("text=events_recounted",), None),
    ("check-history.png", "/assets/events_landed?view=checks&checkDetail=landed_reconciles",
     ("text=landed_reconciles",), "Execution history"),
    ("check-failing.png", "/assets/events_channel?view=checks&checkDetail=checkpoint_fresh",
     ("text=the agent that serves this channel is not running",), None),
    ("runs.png", "/runs", ("text=check_events",), None),
]
# Where the failing check believes the agent is: the address conf/agent.toml gives it.
AGENT_ADDRESS = "127.0.0.1:7431"


def _sigint_default() -> None:
    """In the child: SIGINT back to its default. A process started from a non-interactive shell's
    background job inherits SIGINT *ignored*, and `dg dev` would then never see our SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _boot(port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DAGSTER_HOME": str(DEMO / "dagster"), "INGEST_CONF_DIR": str(DEMO / "conf")}
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


def _shoot(port: int, out: Path) -> list[str]:
    """Photograph every page; returns the problems (an empty list: every picture written)."""
    from playwright.sync_api import sync_playwright

    problems = []
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        for name, path, ready, tab in PAGES:
            started = time.monotonic()
            problem = _open(page, f"http://127.0.0.1:{port}{path}", ready, tab)
            if problem:
                problems.append(f"{name}: {problem}; no picture written")
                print(problems[-1])
                continue
            page.wait_for_timeout(2000)  # let the graph layout settle
            page.screenshot(path=str(out / name))
            print(f"{out / name}  ({time.monotonic() - started:.1f} s)")
        browser.close()
    return problems


def _open(page: object, url: str, ready: tuple[str, ...], tab: str | None) -> str | None:
    """Load ``url``, click ``tab``, wait for every ``ready`` element; what went wrong, or None."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.goto(url, wait_until="networkidle", timeout=60_000)  # type: ignore[attr-defined]
    _dismiss_welcome(page)
    if tab:
        try:
            page.get_by_text(tab, exact=True).first.click(timeout=30_000)  # type: ignore[attr-defined]
        except PlaywrightTimeout:
            return f"tab {tab!r} not found on {url}"
    for selector in ready:
        try:
            page.wait_for_selector(selector, timeout=30_000)  # type: ignore[attr-defined]
        except PlaywrightTimeout:
            return f"{selector!r} did not appear on {url}"
    return None


def _record_failing_check() -> None:
    """Evaluate ``checkpoint_fresh`` of channel ``events`` once on ``var/demo/dagster`` with the landing
    configured to take through an agent while none runs: the failure on-call would see."""
    os.environ["DAGSTER_HOME"] = str(DEMO / "dagster")
    os.environ["INGEST_CONF_DIR"] = str(DEMO / "conf")
    os.environ["INGEST_LANDING__AGENT"] = AGENT_ADDRESS
    import dagster as dg

    from dagster_defs.definitions import defs as load_defs
    from ingest_toolkit.dagster.naming import channel_key

    check = dg.AssetCheckKey(channel_key("events"), "checkpoint_fresh")
    job = dg.define_asset_job("agent_down_check", selection=dg.AssetSelection.checks(check))
    defs = dg.Definitions.merge(load_defs(), dg.Definitions(jobs=[job]))
    with dg.DagsterInstance.get() as instance:
        result = defs.resolve_job_def("agent_down_check").execute_in_process(instance=instance, raise_on_error=False)
    (evaluation,) = result.get_asset_check_evaluations()
    del os.environ["INGEST_LANDING__AGENT"]
    if evaluation.passed:
        raise SystemExit(f"checkpoint_fresh passed ({evaluation.description}): is an agent running? Stop it first")
    print(f"recorded a failing checkpoint_fresh: {evaluation.description}")


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
    os.chdir(REPO)  # conf/ and var/ are relative to the repository root, as for `dg dev`
    if not (DEMO / "dagster" / "dagster.yaml").exists():
        raise SystemExit("no var/demo/dagster: run `.venv/bin/python -m dagster_defs.demo` first")
    args.out.mkdir(parents=True, exist_ok=True)
    _record_failing_check()
    port = _free_port()
    server = _boot(port, REPO / "var" / "ui-screenshots.log")
    try:
        problems = _shoot(port, args.out)
    finally:
        _stop(server)
    if problems:
        print(f"{len(problems)} of {len(PAGES)} pages failed:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
