"""Every configuration block of docs/topologies.md starts as printed, and forwards exactly once.

The blocks are read from the markdown. docs/topologies.md, "The configuration blocks below",
says how each is used and what its placeholders are: a block is the forwarding part of an edge,
completed by the ``[agent]``, ``[channels]`` and ``[sources]`` tables of the shipped
``conf/edge.toml``; ``aggregator-N.example:7431`` stand for the aggregators' addresses. So the
test replaces only those addresses (with aggregators it starts on 127.0.0.1), moves the edge's own
ports off the shipped ones with ``INGEST_AGENT__*__PORT=0`` (environment, not text), and runs the
edge in a deployment root of its own, where the block's relative paths lead (its ``tls_ca``: the
test's CA, of aggregators serving TLS and a token when the block names them). Each block must
pass ``agent --check``, start, and carry events to the aggregators, each stored once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ingest_toolkit.channel import Event
from ingest_toolkit.rpc.client import AgentClient

from ..agent.harness import REPO, AgentProcess, drain
from ..certs import self_signed
from .harness import FleetSetup, free_port, wait_for

pytestmark = pytest.mark.integration

DOC = REPO / "docs" / "topologies.md"
PLACEHOLDER = re.compile(r"aggregator-(\d+)\.example:7431")
TOKEN = "topologies-doc-token"
# the edge's own ports off the shipped ones (by environment); the variable its block's token_env names
EDGE_ENV = {"INGEST_AGENT__GRPC__PORT": "0", "INGEST_AGENT__ADMIN__PORT": "0", "INGEST_UPSTREAM_TOKEN": TOKEN}


def blocks() -> list[str]:
    """The TOML blocks of docs/topologies.md, in order, as printed."""
    return re.findall(r"```toml\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def edge_base() -> str:
    """conf/edge.toml without its [sinks.*] and [sink_groups.*] tables (the block brings its own)."""
    kept, dropping = [], False
    for line in (REPO / "conf" / "edge.toml").read_text().splitlines():
        if line.startswith("["):
            dropping = line.startswith(("[sinks.", "[sink_groups."))
        if not dropping:
            kept.append(line)
    return "\n".join(kept) + "\n"


class Edge:
    """The edge's deployment root, in the shape AgentProcess wants (``root``, ``ports_file``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ports_file = root / "var" / "edge" / "agent" / "ports.json"
        self.conf = root / "conf" / "agent.toml"


def _aggregators(tmp_path: Path, block: str) -> dict[str, FleetSetup]:
    """One aggregator per placeholder of the block; with TLS and a token if the block uses them."""
    secured = "tls_ca" in block or "token_env" in block
    security = ""
    if secured:
        cert, key = self_signed(tmp_path / "tls")
        security = (f'[agent.security]\ntoken_env = "AGG_TOKEN"\n[agent.security.tls]\ncert_file = "{cert}"\n'
                    f'key_file = "{key}"\n')
    numbers = sorted(set(PLACEHOLDER.findall(block)))
    return {n: FleetSetup(tmp_path / f"agg{n}", name=f"agg{n}", grpc_port=free_port(), extra=security)
            for n in numbers}


def _edge(tmp_path: Path, block: str, aggregators: dict[str, FleetSetup]) -> Edge:
    edge = Edge(tmp_path / "edge")
    edge.conf.parent.mkdir(parents=True)
    printed = PLACEHOLDER.sub(lambda m: aggregators[m.group(1)].address, block)
    edge.conf.write_text(edge_base() + "\n" + printed)
    if "tls_ca" in block:
        (edge.root / "conf" / "tls").mkdir()
        shutil.copy(tmp_path / "tls" / "cert.pem", edge.root / "conf" / "tls" / "aggregator-ca.pem")
    return edge


def _held(aggregators: dict[str, FleetSetup], tmp_path: Path) -> int:
    ca = tmp_path / "tls" / "cert.pem"
    secured = {"token": TOKEN, "tls_ca": ca} if ca.exists() else {}
    total = 0
    for setup in aggregators.values():
        with AgentClient(setup.address, timeout=5, **secured) as client:  # type: ignore[arg-type]
            total += int(client.status("events")["queue_size"])
    return total


@pytest.mark.parametrize("number", range(len(blocks())))
def test_a_block_of_the_topologies_doc_starts_as_printed_and_forwards_once(tmp_path: Path, number: int) -> None:
    block = blocks()[number]
    assert PLACEHOLDER.search(block), f"block {number} forwards nowhere:\n{block}"
    aggregators = _aggregators(tmp_path, block)
    edge = _edge(tmp_path, block, aggregators)
    checked = subprocess.run([sys.executable, "-m", "ingest_toolkit.cli", "agent", "--conf", str(edge.conf),
                              "--check"], cwd=edge.root, capture_output=True, text=True, timeout=60,
                             env={**os.environ, **EDGE_ENV})
    assert checked.returncode == 0, (block, checked.stderr)
    procs = [AgentProcess(a, env={"AGG_TOKEN": TOKEN}).wait_ready(60) for a in aggregators.values()]
    try:
        edge_proc = AgentProcess(edge, conf=edge.conf, cwd=edge.root, env=EDGE_ENV)  # type: ignore[arg-type]
        procs.append(edge_proc.wait_ready(60))
        expected = _send(edge_proc)
        wait_for(lambda: _held(aggregators, tmp_path) >= len(expected), timeout=60,
                 what="every event at the aggregators")
    finally:
        for proc in reversed(procs):
            proc.terminate()
    held = Counter(e.body.decode() for a in aggregators.values() for e in drain(a.channel_settings()))
    assert sorted(held) == sorted(expected) and max(held.values()) == 1


def _send(edge: AgentProcess) -> list[str]:
    expected = [f"doc-{n}-{i}" for n in range(6) for i in range(50)]
    with AgentClient(edge.grpc_address, timeout=10) as client:
        for n in range(6):
            client.put([Event(f"doc-{n}-{i}".encode()) for i in range(50)], channel="events", batch_id=f"doc-{n}")
    return expected


def test_the_doc_has_the_blocks_this_test_knows() -> None:
    """Topologies 2 (TLS and a token), 3 (failover) and 4 (load balance, complete on its own)."""
    found = [json.dumps(sorted(set(PLACEHOLDER.findall(b)))) for b in blocks()]
    assert found == ['["1"]', '["1", "2"]', '["1", "2", "3"]'], found
    assert "tls_ca" in blocks()[0] and "token_env" in blocks()[0]
    assert all(not b.lstrip().startswith("[sink_groups") for b in blocks())  # no fragment that needs another
