"""The official MCP conformance suite against a 3-node cluster behind nginx (round-robin, no
affinity): every scenario passes with requests spread over the replicas."""

from __future__ import annotations

import subprocess
from pathlib import Path

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
        # The session's requests really were spread over the replicas.
        served = [c.metric(i, "switchboard_answers_delivered_total") for i in range(3)]
        assert sum(1 for n in served if n > 0) >= 2, f"answers delivered per node: {served}"
