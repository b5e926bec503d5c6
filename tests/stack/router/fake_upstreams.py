"""A scriptable OpenAI-ish upstream for router tests (real HTTP on an ephemeral port).

It stands in for a replica at the router's transport seam: it records every request it
processed (its "ledger"), and each instance can be told to fail, hang, or cut connections.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from drill.stack.http.server import HttpRequest, HttpResponse, HttpServer, ResponseStream, Router


@dataclass
class FakeReplica:
    """``mode``: ok | fail (500) | busy (503 with ``Retry-After: 1``, as admission control) | slow (answer after
    ``delay_s``) | cut (close before any byte) | cut_mid (one chunk, then close). ``health`` is the status
    ``/health`` answers."""

    name: str
    mode: str = "ok"
    health: int = 200
    delay_s: float = 0.0
    chunk_gap_s: float = 0.05
    chunks: int = 3
    ledger: list[dict] = field(default_factory=list)
    headers_seen: list[dict[str, str]] = field(default_factory=list)
    disconnects: list[float] = field(default_factory=list)  # monotonic times the router closed a request early
    health_delay_s: float = 0.0  # how long /health takes to answer
    health_checks: int = 0
    server: HttpServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    async def start(self) -> FakeReplica:
        router = Router()
        router.add("GET", "/health", self._health)
        router.add("POST", "/v1/completions", self._completions)
        router.add("POST", "/v1/chat/completions", self._completions)
        router.add("GET", "/v1/models", self._models)
        self.server = HttpServer(router)
        await self.server.start()
        return self

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()

    async def _health(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        self.health_checks += 1
        await asyncio.sleep(self.health_delay_s)
        return HttpResponse(self.health, b"", "text/plain")

    async def _models(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        return HttpResponse.json({"object": "list", "data": [{"id": "fake", "owned_by": self.name}]})

    async def _completions(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse | None:
        body = request.json()
        self.ledger.append({"replica": self.name, "body": body})
        self.headers_seen.append(dict(request.headers))
        stream.on_disconnect(lambda: self.disconnects.append(time.monotonic()))
        if self.mode == "fail":
            return HttpResponse.json(
                {"error": {"message": "engine dead", "type": "InternalServerError", "param": None, "code": 500}}, 500
            )
        if self.mode == "busy":
            return HttpResponse.json(
                {"error": {"message": "busy", "type": "Service Unavailable", "param": None, "code": 503}},
                503,
                headers=(("Retry-After", "1"),),
            )
        if self.mode in ("cut", "cut_mid"):
            return await self._cut(stream)
        await asyncio.sleep(self.delay_s)
        if body.get("stream"):
            return await self._stream(stream)
        return HttpResponse.json(
            {
                "object": "text_completion",
                "replica": self.name,
                "choices": [{"index": 0, "text": "hi", "finish_reason": "stop"}],
            },
            headers=(("x-request-id", request.headers.get("x-request-id", "none")),),
        )

    async def _stream(self, stream: ResponseStream) -> None:
        stream.start()
        for index in range(self.chunks):
            if index:
                await asyncio.sleep(self.chunk_gap_s)
            event = {
                "object": "text_completion",
                "replica": self.name,
                "choices": [{"index": 0, "text": f"t{index}", "finish_reason": None}],
            }
            stream.write(f"data: {json.dumps(event)}\n\n".encode())
        stream.write(b"data: [DONE]\n\n")
        stream.end()

    async def _cut(self, stream: ResponseStream) -> None:
        if self.mode == "cut_mid":
            stream.start()
            stream.write(b'data: {"choices":[{"text":"t0"}]}\n\n')
            await asyncio.sleep(0.05)
        stream._conn.transport.abort()  # the fake's transport seam: an engine process dying
        stream.started = stream.ended = True
