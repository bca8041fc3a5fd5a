"""The official Python MCP SDK (2.x) as the test client, instrumented so tests can see where
each HTTP request went and what came over the wire.

    async with connect(cluster.url, elicitation=cb) as c:
        result = await c.session.call_tool("confirm", {"action": "x"})
        c.http.last_call().node      # node that answered the tools/call POST (owns the call)
        c.http.answer_to(request_id) # the POST that carried the client's answer (status, node)
        c.wire.notifications("notifications/cancelled")

`HttpLog` is fed by an httpx2 response event hook (the SDK's transport takes an
`httpx2.AsyncClient`); every response of this stack carries `x-switchboard-node`.
`Wire` wraps the transport's read stream and records every JSON-RPC message the server sent,
including the `notifications/cancelled` the SDK applies internally and never surfaces.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client


@dataclass
class Exchange:
    """One HTTP request/response through the front door."""

    http_method: str
    status: int
    node: int | None  # x-switchboard-node of the response
    body: Any  # the JSON-RPC message POSTed (None for GET/DELETE)
    last_event_id: str | None = None  # a GET that resumes a stream
    at: float = field(default_factory=time.monotonic)

    @property
    def rpc_method(self) -> str | None:
        return self.body.get("method") if isinstance(self.body, dict) else None

    @property
    def rpc_id(self) -> Any:
        return self.body.get("id") if isinstance(self.body, dict) else None

    @property
    def is_answer(self) -> bool:
        """A POST carrying a JSON-RPC response (result or error) from the client."""
        return isinstance(self.body, dict) and "method" not in self.body and ("result" in self.body or "error" in self.body)


class HttpLog:
    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []

    async def on_response(self, response: httpx2.Response) -> None:
        request = response.request
        body = None
        if request.method == "POST":
            try:
                body = json.loads(request.content)
            except (ValueError, httpx2.RequestNotRead):
                body = None
        node = response.headers.get("x-switchboard-node")
        self.exchanges.append(
            Exchange(
                request.method,
                response.status_code,
                int(node) if node is not None else None,
                body,
                last_event_id=request.headers.get("last-event-id"),
            )
        )

    def calls(self, method: str = "tools/call") -> list[Exchange]:
        return [e for e in self.exchanges if e.http_method == "POST" and e.rpc_method == method]

    def last_call(self) -> Exchange:
        """The most recent tools/call POST (tests run one call at a time per session)."""
        calls = self.calls()
        assert calls, "no tools/call POST recorded"
        return calls[-1]

    def answers(self) -> list[Exchange]:
        return [e for e in self.exchanges if e.is_answer]

    def answer_to(self, request_id: Any) -> Exchange | None:
        for e in self.exchanges:
            if e.is_answer and e.rpc_id == request_id:
                return e
        return None

    async def wait_answer_to(self, request_id: Any, timeout: float = 10.0) -> Exchange:
        """The answer POST's response may be recorded just after the tool result arrives (the
        owner can resume before the receiving node's 202 reaches us), so wait a bounded time."""
        with anyio.fail_after(timeout):
            while (e := self.answer_to(request_id)) is None:
                await anyio.sleep(0.01)
        return e


class Wire:
    """Every JSON-RPC message the server sent to this client, in arrival order (as dicts)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def record(self, item: Any) -> None:
        message = getattr(item, "message", None)
        if message is not None:
            self.messages.append(message.model_dump(by_alias=True, mode="json", exclude_none=True))

    def requests(self, method: str | None = None) -> list[dict[str, Any]]:
        return [m for m in self.messages if "method" in m and "id" in m and (method is None or m["method"] == method)]

    def notifications(self, method: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m.get("method") == method and "id" not in m]


class RecordingReadStream:
    """Duck-typed stand-in for the SDK transport's read stream that records what passes."""

    def __init__(self, inner: Any, wire: Wire) -> None:
        self._inner = inner
        self._wire = wire

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        item = await self._inner.receive()
        self._wire.record(item)
        return item

    def __aiter__(self) -> RecordingReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> RecordingReadStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


@dataclass
class Client:
    session: ClientSession
    http: HttpLog
    wire: Wire

    async def call(self, name: str, arguments: dict[str, Any], timeout: float = 30.0) -> types.CallToolResult:
        """call_tool, bounded so a hang fails the test instead of the whole suite."""
        with anyio.fail_after(timeout):
            return await self.session.call_tool(name, arguments)


@asynccontextmanager
async def connect(
    url: str,
    *,
    elicitation: Callable[..., Any] | None = None,
    sampling: Callable[..., Any] | None = None,
    message_handler: Callable[..., Any] | None = None,
) -> AsyncIterator[Client]:
    """An initialized SDK session through `url`. Passing no callback means the capability is
    not declared (the SDK advertises elicitation/sampling only when a callback is given)."""
    http = HttpLog()
    wire = Wire()
    timeout = httpx2.Timeout(30.0, read=300.0)
    try:
        async with httpx2.AsyncClient(timeout=timeout, event_hooks={"response": [http.on_response]}) as client:
            async with streamable_http_client(url, http_client=client) as (read, write):
                async with ClientSession(
                    RecordingReadStream(read, wire),
                    write,
                    elicitation_callback=elicitation,
                    sampling_callback=sampling,
                    message_handler=message_handler,
                ) as session:
                    with anyio.fail_after(30):
                        await session.initialize()
                    yield Client(session, http, wire)
    except BaseExceptionGroup as group:
        # The SDK's task groups wrap whatever the test body raised; show the test's own error.
        _raise_single(group)


@asynccontextmanager
async def unwrapped() -> AsyncIterator[None]:
    """Re-raise a task group's lone exception as itself (readable assertion failures)."""
    try:
        yield
    except BaseExceptionGroup as group:
        _raise_single(group)


def _raise_single(group: BaseExceptionGroup) -> None:
    leaves = _leaves(group)
    if len(leaves) == 1:
        raise leaves[0] from None
    raise group


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for e in group.exceptions:
        out.extend(_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    return out


def structured(result: types.CallToolResult) -> Any:
    return result.structured_content


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
