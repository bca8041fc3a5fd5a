"""A hand-driven Streamable HTTP client (httpx, no SDK), for what an SDK will not do on purpose:
answering with forged ids, or with another session's ids."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

PROTOCOL_VERSION = "2025-11-25"
ACCEPT = "application/json, text/event-stream"


async def sse_messages(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """JSON-RPC messages of an SSE body: events are separated by blank lines, `data:` lines
    hold the JSON; events without data (the priming event, keep-alives) are skipped."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                payload = "\n".join(data)
                data = []
                if payload.strip():
                    yield json.loads(payload)
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
    if data and "\n".join(data).strip():
        yield json.loads("\n".join(data))


class RawSession:
    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http = http
        self.url = url
        self.session_id: str | None = None
        self._next_id = 0

    def headers(self) -> dict[str, str]:
        h = {"content-type": "application/json", "accept": ACCEPT}
        if self.session_id is not None:
            h["mcp-session-id"] = self.session_id
            h["mcp-protocol-version"] = PROTOCOL_VERSION
        return h

    def next_id(self) -> int:
        self._next_id += 1
        return self._next_id

    async def initialize(self, capabilities: dict[str, Any]) -> dict[str, Any]:
        body = {
            "jsonrpc": "2.0",
            "id": self.next_id(),
            "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": capabilities,
                "clientInfo": {"name": "switchboard-e2e-raw", "version": "0"},
            },
        }
        r = await self.http.post(self.url, json=body, headers=self.headers())
        assert r.status_code == 200, f"initialize: {r.status_code} {r.text}"
        self.session_id = r.headers.get("mcp-session-id")
        assert self.session_id, "initialize answered without Mcp-Session-Id"
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            messages = [json.loads(line[5:].strip()) for line in r.text.splitlines() if line.startswith("data:") and line[5:].strip()]
            result = next(m for m in messages if m.get("id") == body["id"])
        else:
            result = r.json()
        assert "result" in result, result
        n = await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert n.status_code == 202, f"notifications/initialized: {n.status_code} {n.text}"
        return result["result"]

    async def post(self, message: dict[str, Any]) -> httpx.Response:
        return await self.http.post(self.url, json=message, headers=self.headers())

    def stream_request(self, method: str, params: dict[str, Any]) -> tuple[int, Any]:
        """(id, context manager of the streaming POST response)."""
        rid = self.next_id()
        body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        return rid, self.http.stream("POST", self.url, json=body, headers=self.headers())

    async def delete(self) -> None:
        if self.session_id is not None:
            await self.http.delete(self.url, headers=self.headers())


def tamper(request_id: str) -> str:
    """The id with one character changed to another of the same alphabets (base64url / hex),
    a few characters from the end: inside the AES-GCM tag of a sealed id, so the change is an
    alteration, not a different session's fingerprint."""
    i = len(request_id) - 5
    c = request_id[i]
    if c.isdigit():
        r = str((int(c) + 1) % 10)
    else:
        r = "a" if c != "a" else "b"
    return request_id[:i] + r + request_id[i + 1 :]
