"""Child process of ``test_fork_safety``: landing starts through an agent, each up to the moment
PySpark has launched its JVM gateway, in one fresh interpreter (as ``ingest-toolkit land`` and a
Dagster run worker are).

``SPARK_HOME`` points at a stand-in ``bin/spark-submit`` that does what the JVM gateway does at
launch (write the connection file PySpark waits for, then live until its stdin closes) in a few
milliseconds instead of seconds. PySpark's own ``launch_gateway`` runs unchanged: the same
``Popen`` with ``preexec_fn``, a stdin pipe and ``close_fds``, in the same process state. Its
next step, connecting Py4J to the port the file names, is refused (no JVM listens): that refusal
is a *successful* launch. ``JAVA_GATEWAY_EXITED`` is the failure of the issue: the forked child
died before it could exec.

Usage: ``python -m tests.land.fork_child AGENT_ADDRESS LANDING_CONF AGENT_CONF CLI_STARTS DAGSTER_STARTS``;
prints one JSON line with the counts.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter


def _outcome(error: BaseException | str | None) -> str:
    text = error if isinstance(error, str) else _chain(error)
    if "JAVA_GATEWAY_EXITED" in text:
        return "gateway_exited"
    if "Connection refused" in text or "ConnectionRefusedError" in text:
        return "launched"
    return f"other: {text[-300:]}"


def _chain(error: BaseException | None) -> str:
    parts = []
    while error is not None:
        parts.append(f"{type(error).__name__}: {error}")
        error = error.__cause__ or error.__context__
    return " <- ".join(parts)


def _cli_starts(count: int, address: str, landing_conf: str, outcomes: Counter[str]) -> None:
    from ingest_toolkit.land.cli import land_command  # the module `ingest-toolkit land` runs

    for _ in range(count):
        try:
            land_command.main(["--conf", landing_conf, "--channel", "events", "--agent", address],
                              standalone_mode=False)
            outcomes["other: returned without starting Spark"] += 1
        except BaseException as err:  # noqa: BLE001 - classified below
            outcomes[_outcome(err)] += 1


def _dagster_starts(count: int, address: str, landing_conf: str, agent_conf: str, outcomes: Counter[str]) -> None:
    import dagster as dg

    from ingest_toolkit.dagster.factory import ChannelOptions, build_channel_definitions
    from ingest_toolkit.dagster.naming import landing_job_name
    from ingest_toolkit.orchestrate.settings import OrchestrationSettings, load_channel_specs

    settings = OrchestrationSettings(agent_conf=agent_conf, landing_conf=landing_conf)
    (spec,) = load_channel_specs(agent_conf)
    job = build_channel_definitions(spec, settings, ChannelOptions(agent=address)).resolve_job_def(
        landing_job_name("events"))
    with dg.DagsterInstance.ephemeral() as instance:
        for _ in range(count):
            result = job.execute_in_process(instance=instance, raise_on_error=False)
            failures = [str(e.event_specific_data.error) for e in result.all_events if e.is_step_failure]
            outcomes[_outcome(" ".join(failures)) if failures else "other: the run succeeded"] += 1


def main(argv: list[str]) -> None:
    address, landing_conf, agent_conf, cli_starts, dagster_starts = argv
    from ingest_toolkit.rpc.client import AgentClient

    # Other gRPC work of the process stays live and busy during every launch (a lease keeper,
    # a status poll): the connected-channel state in which the fork used to kill the child.
    busy, stop = AgentClient(address), threading.Event()
    busy.status("events")

    def poll() -> None:
        while not stop.wait(0.005):
            busy.status("events")

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    outcomes: Counter[str] = Counter()
    try:
        _cli_starts(int(cli_starts), address, landing_conf, outcomes)
        _dagster_starts(int(dagster_starts), address, landing_conf, agent_conf, outcomes)
    finally:
        stop.set()
        poller.join()
        busy.close()
    print(json.dumps(dict(outcomes)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
