"""The official MCP conformance suite against a 3-node cluster behind nginx (round-robin, no
affinity): every scenario passes with requests spread over the replicas. The released suite
(0.1.16, `--suite all`) and the pinned pre-release (0.2.0-alpha.12) with its 2026-07-28 and
2025-11-25 requirement sets: 2026-07-28 clients are stateless, so every multi-round-trip retry
is as likely to land on another node as on the one running the call."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cluster import Cluster

REPO = Path(__file__).resolve().parents[2]


def test_conformance_suite_passes_through_nginx_against_three_nodes():
    with Cluster(name="conformance", tools="conformance") as c:
        run = subprocess.run(
            ["bash", str(REPO / "scripts" / "conformance.sh"), c.url],
            capture_output=True,
            text=True,
            timeout=600,
        )
        output = run.stdout + run.stderr
        assert run.returncode == 0, output[-4000:]
        assert "Total: 46 passed, 0 failed" in output, output[-4000:]
        # Sessions' requests really were spread over the replicas. (Counting delivered answers
        # per node said too little: the suite sends only two, and both can land on one node.)
        per_session = c.nodes_per_session()
        spread = [s for s, nodes in per_session.items() if len(nodes) >= 2]
        assert len(spread) >= 5, f"sessions served by 2+ replicas: {len(spread)} of {len(per_session)}"
        assert set().union(*per_session.values()) == {"0", "1", "2"}, per_session


@pytest.mark.parametrize("requirements", ["2026-07-28", "2025-11-25"])
def test_requirement_sets_pass_through_nginx_against_three_nodes(requirements: str):
    with Cluster(name=f"conformance-{requirements}", tools="conformance") as c:
        run = subprocess.run(
            ["bash", str(REPO / "scripts" / "conformance-2026.sh"), c.url, requirements],
            capture_output=True,
            text=True,
            timeout=600,
        )
        output = run.stdout + run.stderr
        assert run.returncode == 0, output[-4000:]
        assert "Total: " in output, output[-4000:]
        if requirements == "2026-07-28":
            # Multi-round-trip calls were answered by more than one replica.
            rounds = [c.metric(i, "switchboard_mrtr_rounds_total", outcome="complete") for i in range(3)]
            assert sum(rounds) > 0, f"completed rounds per node: {rounds}"
