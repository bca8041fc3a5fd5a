"""MCP 2026-07-28 through a real load balancer, with the official Python SDK (mcp 2.3.0).

The SDK's default `Client` probes `server/discover` and, finding 2026-07-28, speaks it: no
session, and elicitation, sampling and roots as multi-round-trip requests (the server answers
`input_required`, the client calls again with the answers). nginx round-robins every POST over
three nodes, so a retry often lands on a node other than the one whose handler is parked on the
call: `x-switchboard-node` on each response shows where. A `mode="legacy"` client on the same
cluster at the same time still gets the 2025-11-25 handshake and SSE elicitation.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client as SdkClient
from mcp import types
from mcp.client.streamable_http import streamable_http_client

from cluster import Cluster
from sdk_client import HttpLog, connect, structured, text

pytestmark = pytest.mark.anyio

ROOT = types.Root(uri="file:///home/user/project", name="project")


async def on_elicit(ctx, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"confirm": True})


async def on_sample(ctx, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    prompt = params.messages[0].content.text
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text=f"LLM says: {prompt[::-1]}"), model="e2e-model", stop_reason="endTurn"
    )


async def on_roots(ctx) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[ROOT])


def modern_client(url: str, http: httpx2.AsyncClient, **kwargs: Any) -> SdkClient:
    return SdkClient(streamable_http_client(url, http_client=http), **kwargs)


async def test_the_default_client_negotiates_2026_and_retries_reach_other_nodes(cluster: Cluster):
    log = HttpLog()
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0), event_hooks={"response": [log.on_response]}) as http:
        async with modern_client(
            cluster.url, http, elicitation_callback=on_elicit, sampling_callback=on_sample, list_roots_callback=on_roots
        ) as client:
            assert client.protocol_version == "2026-07-28"
            with anyio.fail_after(60):
                for i in range(6):
                    result = await client.call_tool("confirm", {"action": f"deploy {i}"})
                    assert structured(result) == {"action": f"deploy {i}", "answer": "confirmed"}, result
                sampled = await client.call_tool("ask_llm", {"prompt": "hello cluster"})
                assert text(sampled) == "LLM says: retsulc olleh"
                listed = await client.call_tool("roots", {})
                assert structured(listed) == {"roots": [{"uri": str(ROOT.uri), "name": ROOT.name}]}, structured(listed)
    calls = log.calls()
    firsts = [e for e in calls if "requestState" not in e.body["params"]]
    retries = [e for e in calls if "requestState" in e.body["params"]]
    assert len(firsts) == len(retries) == 8, [(e.node, e.body["params"].get("name")) for e in calls]
    assert all(e.status == 200 for e in calls)
    # Calls ran one after another, so the n-th retry continues the n-th call.
    moved = [(first.node, retry.node) for first, retry in zip(firsts, retries) if first.node != retry.node]
    assert moved, f"every retry was answered by the node that ran its call: {[(f.node, r.node) for f, r in zip(firsts, retries)]}"
    # Stateless: no GET stream, no session, no answers POSTed as JSON-RPC responses.
    assert not [e for e in log.exchanges if e.http_method != "POST"]
    assert not [e for e in log.exchanges if e.is_answer]
    # The owners counted the completed rounds; the nodes that got a moved retry relayed it.
    assert sum(cluster.metric(i, "switchboard_mrtr_rounds_total", outcome="complete") for i in range(3)) >= 8
    assert sum(cluster.metric(i, "switchboard_mrtr_retries_total", owner="elsewhere") for i in range(3)) >= len(moved)


async def test_a_legacy_client_on_the_same_cluster_still_gets_sse_elicitation(cluster: Cluster):
    async with connect(cluster.url, elicitation=on_elicit) as legacy:
        result = await legacy.call("confirm", {"action": "legacy"})
        assert structured(result) == {"action": "legacy", "answer": "confirmed"}
        # The question came as a server-to-client request on an SSE stream, answered by a POST.
        assert legacy.wire.requests("elicitation/create")
        assert legacy.http.answers()


async def test_a_client_without_the_capability_gets_a_clear_error(cluster: Cluster):
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http:
        async with modern_client(cluster.url, http) as client:
            with anyio.fail_after(30):
                with pytest.raises(Exception) as raised:
                    await client.call_tool("ask_llm", {"prompt": "hi"})
    assert "sampling" in str(raised.value), raised.value
