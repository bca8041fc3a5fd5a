"""Cross-node elicitation and sampling through a real load balancer.

nginx round-robins every HTTP request over three `switchboard serve` processes (no affinity), so
one MCP session's requests, and the client's answers to the server's requests, land on any
node. The official Python SDK is the client (tests a-h); raw HTTP forges what an SDK will not (i).

Which node handled what is read from `x-switchboard-node` on each response: the node that
answered the `tools/call` POST runs the tool (owns the call); the POST carrying the client's
JSON-RPC response shows where the answer landed.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import httpx
import pytest
from mcp import types
from mcp.shared.exceptions import MCPError

from cluster import Cluster
from conftest import SHARED_TIMEOUT_S
from raw_client import RawSession, sse_messages, tamper
from sdk_client import Client, connect, structured, text, unwrapped

pytestmark = pytest.mark.anyio

OUTCOMES = "switchboard_client_request_outcomes_total"
ORPHANS = "switchboard_orphan_responses_total"

ACCEPT = types.ElicitResult(action="accept", content={"confirm": True})
DECLINE = types.ElicitResult(action="decline")


def outcomes(cluster: Cluster, kind: str, outcome: str) -> dict[int, float]:
    return {i: cluster.metric(i, OUTCOMES, kind=kind, outcome=outcome) for i in cluster.alive_nodes()}


def orphans(cluster: Cluster) -> dict[tuple[int, str], float]:
    """Dropped client answers, by (node, reason)."""
    found: dict[tuple[int, str], float] = {}
    for i in cluster.alive_nodes():
        for (name, labels), value in cluster.metrics(i).items():
            if name == ORPHANS:
                found[(i, dict(labels).get("reason", ""))] = value
    return found


def delta(after: dict, before: dict) -> dict:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


class Box:
    """Lets a callback reach the client it belongs to (the callback is made before the client)."""

    client: Client


# ---- a. elicitation: accept / decline / cancel ---------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        (ACCEPT, "confirmed"),
        (types.ElicitResult(action="accept", content={"confirm": False}), "not confirmed"),
        (DECLINE, "declined"),
        (types.ElicitResult(action="cancel"), "cancelled"),
    ],
    ids=["accept", "accept-false", "decline", "cancel"],
)
async def test_elicitation_answer_reaches_the_tool(cluster: Cluster, reply: types.ElicitResult, answer: str):
    seen: list[tuple[Any, Any]] = []

    async def on_elicit(ctx, params):
        seen.append((ctx.request_id, params))
        return reply

    async with connect(cluster.url, elicitation=on_elicit) as c:
        result = await c.call("confirm", {"action": "deploy web-1"})
        assert not result.is_error, text(result)
        assert structured(result) == {"action": "deploy web-1", "answer": answer}
        assert json.loads(text(result)) == {"action": "deploy web-1", "answer": answer}

        assert len(seen) == 1, "the elicitation callback should run exactly once"
        request_id, params = seen[0]
        assert "deploy web-1" in params.message
        assert params.requested_schema["properties"]["confirm"]["type"] == "boolean"
        assert params.requested_schema["required"] == ["confirm"]
        answered = await c.http.wait_answer_to(request_id)
        assert answered.status == 202


# ---- b. sampling ---------------------------------------------------------------------------------


async def test_sampling_reply_reaches_the_tool(cluster: Cluster):
    seen: list[Any] = []

    async def on_sample(ctx, params: types.CreateMessageRequestParams):
        seen.append((ctx.request_id, params))
        prompt = params.messages[0].content.text
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"LLM says: {prompt[::-1]}"),
            model="e2e-model",
            stop_reason="endTurn",
        )

    async with connect(cluster.url, sampling=on_sample) as c:
        result = await c.call("ask_llm", {"prompt": "hello cluster", "max_tokens": 42})
        assert not result.is_error, text(result)
        assert text(result) == "LLM says: retsulc olleh"
        assert len(seen) == 1
        request_id, params = seen[0]
        assert params.max_tokens == 42
        assert (await c.http.wait_answer_to(request_id)).status == 202


# ---- c. the answer lands on another node than the one running the tool ---------------------------


async def test_answer_on_another_node_wakes_the_owner(cluster: Cluster):
    history: list[tuple[int | None, int | None]] = []
    request_ids: list[Any] = []

    async def on_elicit(ctx, params):
        request_ids.append(ctx.request_id)
        return ACCEPT

    async with connect(cluster.url, elicitation=on_elicit) as c:
        for attempt in range(1, 21):
            delivered_before = outcomes(cluster, "elicitation", "delivered")
            orphans_before = orphans(cluster)

            result = await c.call("confirm", {"action": f"attempt {attempt}"})
            assert not result.is_error, text(result)
            assert structured(result) == {"action": f"attempt {attempt}", "answer": "confirmed"}

            owner = c.http.last_call().node
            answered = await c.http.wait_answer_to(request_ids[-1])
            assert answered.status == 202
            history.append((owner, answered.node))

            # Exactly the owner resumed a parked call with a delivered answer; nothing was dropped.
            delivered = delta(outcomes(cluster, "elicitation", "delivered"), delivered_before)
            assert delivered == {owner: 1}, f"owner {owner}, answer on {answered.node}: delivered deltas {delivered}"
            assert delta(orphans(cluster), orphans_before) == {}

            if answered.node != owner:
                break
        else:
            pytest.fail(f"in 20 calls the answer never landed on another node than the owner: {history}")

        # No affinity: this one session's requests were spread over every node.
        nodes = {e.node for e in c.http.exchanges}
        assert nodes == {0, 1, 2}, f"session's requests only reached nodes {nodes}"


# ---- d. timeout: notifications/cancelled, then an error result -----------------------------------


@pytest.mark.parametrize(("tool", "arguments", "kind"), [
    ("confirm", {"action": "wait forever"}, "elicitation"),
    ("ask_llm", {"prompt": "think forever"}, "sampling"),
])  # fmt: skip
async def test_unanswered_request_times_out(cluster: Cluster, tool: str, arguments: dict, kind: str):
    started: list[Any] = []
    cancelled: list[Any] = []
    never = anyio.Event()

    async def hang(ctx, params):
        started.append(ctx.request_id)
        try:
            await never.wait()
        except anyio.get_cancelled_exc_class():
            cancelled.append(ctx.request_id)
            raise
        raise AssertionError("unreachable")

    callbacks = {"elicitation": hang} if kind == "elicitation" else {"sampling": hang}
    async with connect(cluster.url, **callbacks) as c:
        timeouts_before = outcomes(cluster, kind, "timeout")
        t0 = time.monotonic()
        result = await c.call(tool, arguments)
        elapsed = time.monotonic() - t0

        assert result.is_error, f"expected a timeout error, got {result}"
        assert f"{kind} request timed out after {SHARED_TIMEOUT_S}s" in text(result), text(result)
        assert SHARED_TIMEOUT_S - 0.5 < elapsed < SHARED_TIMEOUT_S + 10, f"the timeout is {SHARED_TIMEOUT_S}s, the call took {elapsed:.1f}s"
        assert len(started) == 1
        request_id = started[0]

        cancels = [m for m in c.wire.notifications("notifications/cancelled") if m["params"].get("requestId") == request_id]
        assert cancels, f"no notifications/cancelled for {request_id!r}; wire: {c.wire.messages}"
        with anyio.fail_after(5):  # the SDK applies it by cancelling the callback
            while request_id not in cancelled:
                await anyio.sleep(0.01)

        owner = c.http.last_call().node
        assert delta(outcomes(cluster, kind, "timeout"), timeouts_before) == {owner: 1}


# ---- e. the client answers with a JSON-RPC error -------------------------------------------------


@pytest.mark.parametrize("kind", ["elicitation", "sampling"])
async def test_client_error_reaches_the_tool(cluster: Cluster, kind: str):
    seen: list[Any] = []

    async def refuse(ctx, params):
        seen.append(ctx.request_id)
        return types.ErrorData(code=-32042, message="the user agent exploded")

    if kind == "elicitation":
        tool, arguments, callbacks = "confirm", {"action": "format disk"}, {"elicitation": refuse}
    else:
        tool, arguments, callbacks = "ask_llm", {"prompt": "hi"}, {"sampling": refuse}
    async with connect(cluster.url, **callbacks) as c:
        errors_before = outcomes(cluster, kind, "client_error")
        result = await c.call(tool, arguments)
        assert result.is_error, f"expected an error result, got {result}"
        message = text(result)
        assert f"answered the {kind} request with error" in message, message
        assert "-32042" in message and "the user agent exploded" in message, message

        assert len(seen) == 1
        answered = await c.http.wait_answer_to(seen[0])
        assert answered.status == 202
        assert answered.body["error"]["code"] == -32042
        owner = c.http.last_call().node
        assert delta(outcomes(cluster, kind, "client_error"), errors_before) == {owner: 1}


# ---- f. a client without the capabilities --------------------------------------------------------


async def test_client_without_capabilities_gets_an_error_and_no_request(cluster: Cluster):
    async with connect(cluster.url) as c:  # no callbacks: the SDK declares neither capability
        capabilities = c.http.calls("initialize")[0].body["params"]["capabilities"]
        assert "elicitation" not in capabilities and "sampling" not in capabilities, capabilities

        result = await c.call("confirm", {"action": "x"})
        assert result.is_error
        assert "did not declare the elicitation capability" in text(result), text(result)

        result = await c.call("ask_llm", {"prompt": "x"})
        assert result.is_error
        assert "did not declare the sampling capability" in text(result), text(result)

        # Nothing was asked of the client: no server-to-client request arrived, no answer was sent.
        assert c.wire.requests() == [], c.wire.requests()
        assert c.http.answers() == []


# ---- g. the Raft leader dies while a call is parked ----------------------------------------------


async def test_leader_killed_while_parked(make_cluster):
    cluster: Cluster = make_cluster(name="leader-kill", elicitation_timeout="15s", sampling_timeout="15s")
    attempts: list[str] = []

    for attempt in range(1, 11):
        box = Box()
        state: dict[str, Any] = {}

        async def on_elicit(ctx, params, box=box, state=state):
            owner = box.client.http.last_call().node
            leader = await anyio.to_thread.run_sync(cluster.leader)
            state.update(request_id=ctx.request_id, owner=owner, old_leader=leader)
            if owner == leader:
                return DECLINE  # try again with a fresh session
            await anyio.to_thread.run_sync(cluster.kill, leader)
            survivors = [i for i in range(3) if i != leader]
            state["new_leader"] = await anyio.to_thread.run_sync(lambda: cluster.leader(timeout=15, among=survivors))
            await anyio.sleep(0.3)
            return ACCEPT

        async with connect(cluster.url, elicitation=on_elicit) as c:
            box.client = c
            delivered_before = outcomes(cluster, "elicitation", "delivered")
            result = await c.call("confirm", {"action": "survive a leader change"}, timeout=45)
            assert "owner" in state, f"the elicitation never reached the client: {result}"
            if state["owner"] == state["old_leader"]:
                attempts.append(f"owner {state.get('owner')} was the leader")
                assert structured(result) == {"action": "survive a leader change", "answer": "declined"}
                continue

            assert "new_leader" in state, f"callback did not finish: {state}"
            assert not result.is_error, text(result)
            assert structured(result) == {"action": "survive a leader change", "answer": "confirmed"}
            answered = await c.http.wait_answer_to(state["request_id"])
            assert answered.status == 202
            assert answered.node != state["old_leader"]
            owner = state["owner"]
            delivered = delta(outcomes(cluster, "elicitation", "delivered"), delivered_before)
            assert delivered == {owner: 1}, delivered
            assert cluster.status(owner)["leader"] == state["new_leader"]
            print(
                f"attempt {attempt}: owner {owner}, leader {state['old_leader']} killed, new leader "
                f"{state['new_leader']}, answer landed on {answered.node}"
            )
            return

    pytest.fail(f"the tool never ran on a follower in 10 sessions: {attempts}")


# ---- h. the owner dies while its call is parked --------------------------------------------------


async def _call_expecting_failure(c: Client, arguments: dict, timeout: float) -> tuple[str, float]:
    """Run confirm; it must fail (error result or MCP error), within `timeout`."""
    t0 = time.monotonic()
    try:
        with anyio.fail_after(timeout):
            result = await c.session.call_tool("confirm", arguments)
    except MCPError as e:
        return f"MCPError {e.error.code}: {e.error.message}", time.monotonic() - t0
    except TimeoutError:
        pytest.fail(f"the call did not end within {timeout}s after its owner died")
    assert result.is_error, f"the owner died, yet the call succeeded: {result}"
    return f"error result: {text(result)}", time.monotonic() - t0


def _pending_mailboxes(cluster: Cluster) -> dict[int, int]:
    """pending_mailboxes of `switchboard cluster status`, per live node."""
    return {i: cluster.status(i)["pending_mailboxes"] for i in cluster.alive_nodes()}


def _pending_gauges(cluster: Cluster) -> dict[int, float]:
    """switchboard_mailboxes_pending, per live node (published on the node's Raft tick)."""
    return {i: cluster.metric(i, "switchboard_mailboxes_pending") for i in cluster.alive_nodes()}


async def _wait_pending(cluster: Cluster, want: int, timeout: float) -> None:
    """Wait until every live node reports `want` pending mailboxes, in its status and gauge."""
    deadline = time.monotonic() + timeout
    while True:
        status = await anyio.to_thread.run_sync(_pending_mailboxes, cluster)
        gauges = await anyio.to_thread.run_sync(_pending_gauges, cluster)
        if set(status.values()) == {want} and set(gauges.values()) == {want}:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"pending mailboxes never became {want} within {timeout}s: status {status}, gauges {gauges}")
        await anyio.sleep(0.2)


async def test_owner_killed_then_answered(make_cluster):
    # 2s elicitation timeout: the mailbox deadline is 2s + the server's 5s grace.
    cluster: Cluster = make_cluster(name="owner-kill", elicitation_timeout="2s", sampling_timeout="2s")
    box = Box()
    state: dict[str, Any] = {}

    async def on_elicit(ctx, params):
        owner = box.client.http.last_call().node
        state.update(request_id=ctx.request_id, owner=owner)
        await anyio.to_thread.run_sync(cluster.kill, owner)
        return ACCEPT

    async with connect(cluster.url, elicitation=on_elicit) as c:
        box.client = c
        outcome, elapsed = await _call_expecting_failure(c, {"action": "orphaned"}, timeout=30)
        print(f"owner {state.get('owner')} killed; the call ended after {elapsed:.1f}s with {outcome}")
        assert "owner" in state, "the elicitation never reached the client"

        # The answer was accepted by a survivor (202), even though its owner is gone.
        answered = await c.http.wait_answer_to(state["request_id"], timeout=15)
        assert answered.status == 202, answered
        assert answered.node != state["owner"]

        # And the cluster forgets the call: no mailbox stays pending past its deadline.
        await _wait_pending(cluster, 0, timeout=2 + 5 + 10)


async def test_owner_killed_unanswered_mailbox_expires(make_cluster):
    cluster: Cluster = make_cluster(name="owner-kill-2", elicitation_timeout="2s", sampling_timeout="2s")
    box = Box()
    state: dict[str, Any] = {}
    never = anyio.Event()

    async def on_elicit(ctx, params):
        owner = box.client.http.last_call().node
        state.update(request_id=ctx.request_id, owner=owner)
        await anyio.to_thread.run_sync(cluster.kill, owner)
        state["killed"] = True
        # The survivors still hold the dead owner's mailbox (its deadline is 2s + 5s grace away).
        state["pending_after_kill"] = await anyio.to_thread.run_sync(_pending_mailboxes, cluster)
        await never.wait()  # the user never answers
        return ACCEPT

    async with connect(cluster.url, elicitation=on_elicit) as c:
        box.client = c
        outcome, elapsed = await _call_expecting_failure(c, {"action": "abandoned"}, timeout=30)
        print(f"owner {state.get('owner')} killed; the call ended after {elapsed:.1f}s with {outcome}")
        assert state.get("killed"), "the elicitation never reached the client"

        # The survivors replicate the dead owner's mailbox until its deadline, then expire it.
        assert set(state["pending_after_kill"].values()) == {1}, state["pending_after_kill"]
        await _wait_pending(cluster, 0, timeout=2 + 5 + 10)


# ---- i. forged and cross-session answers (raw HTTP) ----------------------------------------------


async def test_forged_and_cross_session_answers_are_dropped(cluster: Cluster):
    timeout = httpx.Timeout(30.0, read=30.0)
    async with httpx.AsyncClient(timeout=timeout) as http:
        a = RawSession(http, cluster.url)
        b = RawSession(http, cluster.url)
        await a.initialize({"elicitation": {"form": {}}})
        await b.initialize({"elicitation": {"form": {}}})
        assert a.session_id != b.session_id
        orphans_before = orphans(cluster)

        call_id, stream = a.stream_request("tools/call", {"name": "confirm", "arguments": {"action": "launch"}})
        async with stream as response, unwrapped(), anyio.create_task_group() as tg:
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"].startswith("text/event-stream")
            # A reader task moves the stream's messages into a queue, so waiting on the queue can
            # time out without breaking the SSE parser.
            send, inbox = anyio.create_memory_object_stream[dict](100)

            async def pump() -> None:
                async with send:
                    async for message in sse_messages(response):
                        await send.send(message)

            tg.start_soon(pump)

            async def next_message(timeout: float = 10.0) -> dict:
                with anyio.fail_after(timeout):
                    while "method" in (m := await inbox.receive()) and "id" not in m:
                        pass  # skip notifications
                return m

            elicitation = await next_message()
            assert elicitation.get("method") == "elicitation/create", elicitation
            request_id = elicitation["id"]
            assert isinstance(request_id, str), request_id

            # Two bogus answers, both "decline": if either reached the tool it would say so.
            forged = tamper(request_id)
            assert forged != request_id
            bogus = {"action": "decline"}
            r1 = await a.post({"jsonrpc": "2.0", "id": forged, "result": bogus})
            r2 = await b.post({"jsonrpc": "2.0", "id": request_id, "result": bogus})
            assert (r1.status_code, r2.status_code) == (202, 202), (r1.text, r2.text)

            # They did not complete the call.
            with anyio.move_on_after(0.3):
                early = await next_message()
                pytest.fail(f"the call completed on a bogus answer: {early}")

            real = {"action": "accept", "content": {"confirm": True}}
            r3 = await a.post({"jsonrpc": "2.0", "id": request_id, "result": real})
            assert r3.status_code == 202, r3.text
            final = await next_message()
            assert final.get("id") == call_id, final
            assert final["result"]["structuredContent"] == {"action": "launch", "answer": "confirmed"}, final
            tg.cancel_scope.cancel()

        dropped = delta(orphans(cluster), orphans_before)
        by_reason: dict[str, float] = {}
        for (_node, reason), n in dropped.items():
            by_reason[reason] = by_reason.get(reason, 0) + n
        # Counted where they landed, each under its own reason.
        assert by_reason == {"tampered": 1, "wrong_session": 1}, dropped
        await a.delete()
        await b.delete()
