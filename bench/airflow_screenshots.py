"""Screenshots of the Airflow 3 UI: the ``ingest_agent`` connection form, and the log of a failed check.

Run from the repository root, in the virtualenv with the ``[airflow]`` extra::

    .venv/bin/pip install playwright          # the Python driver only; no browser download
    apt-get install chromium                  # or: .venv/bin/playwright install chromium
    .venv/bin/python bench/airflow_screenshots.py [--out docs/img]

Builds a throwaway Airflow in ``var/airflow-screenshots`` (its ``AIRFLOW_HOME``: SQLite metadata
database, dags folder, logs; removed first, kept after for a look): a channel ``events`` of 1000
events whose first log file is then deleted while the checkpoint still references it, and a DAG
``check_events`` of one ``ChannelCheckOperator`` (``referenced_logs_intact``) on it. Starts
``airflow standalone`` (API server, scheduler, DAG processor, triggerer; every user an admin, no
login) on a free port of 127.0.0.1 in its own process group, unpauses and triggers the DAG through
the REST API, waits for its run to fail, and photographs in headless Chromium (``playwright``
driving the system's ``chromium`` when there is one, else playwright's own browser):

* ``airflow-connection-form.png``: Admin > Connections > Add, connection type *Ingest Toolkit
  agent*: the form the provider declares, its standard fields (Login and Schema hidden, Host and
  Port relabelled with their placeholders) and beside them its extra fields (the dialog shows one
  section at a time: two pictures of it, set side by side in the same browser);
* ``airflow-failed-check-log.png``: the log of the failed check task.

Every page waits for the text that proves it shows what its picture is for; if it does not appear
no picture is written and the script exits with code 1. Not run in CI: it needs a browser and
about a minute of a real Airflow.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]
HOME = REPO / "var" / "airflow-screenshots"
DAG = '''
from datetime import UTC, datetime

from airflow.sdk import DAG

from ingest_toolkit.airflow import ChannelCheckOperator

with DAG(dag_id="check_events", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC), catchup=False):
    ChannelCheckOperator(task_id="referenced_logs_intact", check="referenced_logs_intact", channel="events",
                         retries=0)
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(port: int) -> dict[str, str]:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # standalone runs `airflow`
    return {**os.environ, "PATH": path, "AIRFLOW_HOME": str(HOME), "AIRFLOW__CORE__DAGS_FOLDER": str(HOME / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__TEST_CONNECTION": "Enabled", "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5", "INGEST_CONF_DIR": str(HOME / "conf")}


def _broken_channel() -> None:
    """Channel ``events`` under HOME with 1000 events in two log files, checkpointed, then the first deleted."""
    from ingest_toolkit.channel import Event, FileChannel

    conf = HOME / "conf"
    conf.mkdir(parents=True)
    (conf / "agent.toml").write_text(
        f'[channels.events]\ncheckpoint_dir = "{HOME}/channel/checkpoint"\ndata_dirs = ["{HOME}/channel/data"]\n'
        'capacity = 10000\nmin_free_bytes = 0\nmax_file_size = 65536\npreallocate_bytes = 0\n')
    (conf / "landing.toml").write_text(f'[landing]\nroot = "{HOME}/landing"\n')
    (conf / "orchestrate.toml").write_text(f'[orchestrate]\nagent_conf = "{conf / "agent.toml"}"\n'
                                           f'landing_conf = "{conf / "landing.toml"}"\n')
    with FileChannel(checkpoint_dir=str(HOME / "channel" / "checkpoint"), data_dirs=[str(HOME / "channel" / "data")],
                     min_free_bytes=0, max_file_size=65536, preallocate_bytes=0) as channel:
        with channel.transaction() as tx:
            tx.put_many([Event(f'{{"n": {n}}}'.encode().ljust(96), {"timestamp": "1763798400000"})
                         for n in range(1000)])
        channel.checkpoint()
    first = min(p for p in (HOME / "channel" / "data").glob("log-*") if not p.suffix)
    first.unlink()
    print(f"channel events: 1000 events, {first.name} deleted")


def _boot(port: int, log: Path) -> subprocess.Popen[bytes]:
    airflow = str(Path(sys.executable).with_name("airflow"))
    with log.open("wb") as out:
        done = subprocess.run([airflow, "db", "migrate"], env=_env(port), stdout=out, stderr=subprocess.STDOUT)
        if done.returncode:
            raise SystemExit(f"airflow db migrate failed; see {log}")
        # From the repository root, as the README runs Airflow: a verdict's runbook link is docs/runbook.md#...
        server = subprocess.Popen([airflow, "standalone"], cwd=REPO, env=_env(port), stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"airflow standalone exited ({server.returncode}); see {log}")
        try:
            if _api(port, "/api/v2/dags/check_events").get("dag_id") == "check_events":
                return server
        except OSError:
            pass
        time.sleep(2)
    _stop(server)
    raise SystemExit(f"airflow standalone did not serve the DAG in 300 s; see {log}")


def _stop(server: subprocess.Popen[bytes]) -> None:
    """SIGTERM to standalone's process group, then wait for every process of it (the scheduler and
    the triggerer outlive standalone by a few seconds); SIGKILL what is left after 60 s."""
    os.killpg(server.pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        server.poll()
        try:
            os.killpg(server.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    os.killpg(server.pid, signal.SIGKILL)
    server.wait()


def _api(port: int, path: str, body: dict[str, Any] | None = None, method: str | None = None) -> Any:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _failed_run(port: int) -> str:
    """Unpause and trigger ``check_events``; its run id once the run failed."""
    _api(port, "/api/v2/dags/check_events", {"is_paused": False}, "PATCH")
    run = _api(port, "/api/v2/dags/check_events/dagRuns", {"logical_date": None})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        state = _api(port, f"/api/v2/dags/check_events/dagRuns/{run['dag_run_id']}")["state"]
        if state in ("failed", "success"):
            if state != "failed":
                raise SystemExit("the check passed: the channel was not broken")
            print(f"run {run['dag_run_id']} failed")
            return str(run["dag_run_id"])
        time.sleep(2)
    raise SystemExit("the run did not end in 300 s")


def _shoot(port: int, run_id: str, out: Path) -> list[str]:
    """Photograph both pages; returns the problems (an empty list: both pictures written)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    problems = []
    base = f"http://127.0.0.1:{port}"
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1400, "height": 1150})
        for name, take in (("airflow-connection-form.png", lambda: _connection_form(page, base)),
                           ("airflow-failed-check-log.png", lambda: _check_log(page, base, run_id))):
            try:
                picture = take()
            except PlaywrightTimeout as err:
                page.screenshot(path=str(HOME / f"failed-{name}"))  # what was shown instead, for a look
                problems.append(f"{name}: {str(err).splitlines()[0]}; no picture written (see {HOME}/failed-{name})")
                print(problems[-1])
                continue
            (out / name).write_bytes(picture)
            print(f"{out / name}")
        browser.close()
    return problems


def _connection_form(page: Any, base: str) -> bytes:
    """The Add Connection dialog with type *Ingest Toolkit agent*: its standard fields, and beside
    them its extra fields (the dialog opens one section at a time: two pictures, set side by side)."""
    page.goto(f"{base}/connections", wait_until="networkidle", timeout=60_000)
    page.get_by_role("button", name="Add Connection").click(timeout=30_000)
    page.locator("input[name=connection_id]").fill("ingest_agent")
    page.get_by_role("combobox").first.fill("Ingest Toolkit")
    page.keyboard.press("Enter")
    page.get_by_placeholder("7431").wait_for(timeout=30_000)
    for ready in ("Agent host", "Agent gRPC port", "Bearer token"):
        page.get_by_text(ready, exact=True).first.wait_for(timeout=30_000)
    page.wait_for_timeout(1000)
    standard = page.get_by_role("dialog").screenshot()
    page.get_by_text("Extra Fields", exact=True).click(timeout=30_000)
    for ready in ("Channel", "Token variable", "TLS CA file", "TLS client key"):
        page.get_by_text(ready, exact=True).first.wait_for(timeout=30_000)
    page.wait_for_timeout(1000)
    extra = page.get_by_role("dialog").screenshot()
    return _side_by_side(page, standard, extra)


def _side_by_side(page: Any, *pictures: bytes) -> bytes:
    """``pictures`` in a row, top-aligned, on the grey of the dialog's backdrop."""
    images = "".join(f'<img src="data:image/png;base64,{base64.b64encode(p).decode()}">' for p in pictures)
    page.set_content(f'<body style="margin:0"><div id="row" style="display:inline-flex;align-items:flex-start;'
                     f'gap:24px;padding:24px;background:#cbd5e1">{images}</div></body>')
    shot: bytes = page.locator("#row").screenshot()
    return shot


def _check_log(page: Any, base: str, run_id: str) -> bytes:
    """The failed task's log: the traceback folded (its frames name this machine's paths), lines wrapped."""
    page.goto(f"{base}/dags/check_events/runs/{run_id}/tasks/referenced_logs_intact", wait_until="networkidle",
              timeout=60_000)
    failure = page.get_by_text("CheckFailedError: check referenced_logs_intact failed", exact=False).first
    failure.wait_for(timeout=60_000)
    failure.click()  # folds the traceback under it
    page.keyboard.press("w")  # the log viewer's key for wrapping long lines
    page.mouse.click(900, 650)  # the focus ring off the folded line
    page.wait_for_timeout(1000)
    shot: bytes = page.screenshot(clip={"x": 0, "y": 0, "width": 1400, "height": 620})
    return shot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Screenshots of the Airflow UI (connection form, failed check)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    args = parser.parse_args(argv)
    shutil.rmtree(HOME, ignore_errors=True)
    (HOME / "dags").mkdir(parents=True)
    (HOME / "dags" / "check_events.py").write_text(DAG)
    _broken_channel()
    args.out.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    server = _boot(port, HOME / "standalone.log")
    try:
        problems = _shoot(port, _failed_run(port), args.out)
    finally:
        _stop(server)
    if problems:
        print(f"{len(problems)} of 2 pages failed:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
