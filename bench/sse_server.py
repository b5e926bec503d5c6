"""A small, fast OpenAI-style SSE server that records when it sent every chunk.

Used by ``bench/load_driver.py`` (timestamp accuracy of load tools) and by the
load driver's tests (``tests/load/``), always as a separate process::

    python bench/sse_server.py --port 0 --ready-file /tmp/x.json [--gap-ms 20] [--ttft-ms 0]

Standard library only, one asyncio event loop. Streams are served by a 1 ms
ticker: each stream emits its next chunk every ``gap_ms`` on its own phase, one
token per chunk, and the server records ``time.time()`` just before writing
each chunk (the ground truth a client's chunk timestamps are compared with:
the difference is the client's delivery lag, kernel and scheduling included).

Endpoints: ``POST /v1/chat/completions`` and ``/v1/completions`` (streaming as
vLLM, §3.1 of docs/serving-facts.md: chat role chunk with the first token, usage
chunk, ``[DONE]``; non-streaming JSON with ``usage``), ``GET /v1/models``,
``GET /health``; test controls ``PUT /_bench/config`` (JSON: ``gap_ms``,
``ttft_ms``, ``fail_status``, ``fail_every``, ``midstream_error_after``, ``midstream_error_code``,
``cut_after``, ``hang_headers``), ``PUT /_bench/stall`` (``{"seconds": 2}``:
no chunk is sent and no stream starts until it ends), ``GET /_bench/log`` (one
JSON object per request: ``request_id``, ``idempotency_key``, ``traceparent``,
``arrival_ts``, ``first_token_ts``, ``finish_ts``, ``sends``, ``status``,
``prompt_tokens``, ``completion_tokens``, ``body_sha256``) and ``DELETE /_bench/log``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import signal
import time
from collections import defaultdict

TICK_S = 0.001


class Config:
    def __init__(self, gap_ms: float, ttft_ms: float) -> None:
        self.gap_ms = gap_ms
        self.ttft_ms = ttft_ms
        self.fail_status = 0  # answer every `fail_every`-th request with this status (0: never)
        self.fail_every = 1
        self.midstream_error_after = -1  # send an error event after this many chunks (-1: never)
        self.midstream_error_code = 500  # its code; 503 after 0 chunks is vLLM's refusal after the 200 went out
        self.cut_after = -1  # close the connection after this many chunks (-1: never)
        self.hang_headers = 0.0  # delay the response headers by this many seconds


class Stream:
    __slots__ = ("conn", "entry", "total", "sent", "template", "chat", "usage", "next_tick", "prompt_tokens")

    def __init__(self, conn, entry, total, chat, usage, prompt_tokens, model):
        self.conn, self.entry, self.total, self.chat, self.usage = conn, entry, total, chat, usage
        self.sent = 0
        self.prompt_tokens = prompt_tokens
        kind = "chat.completion.chunk" if chat else "text_completion"
        rid = entry["request_id"]
        if chat:
            body = '"choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}]'
        else:
            body = '"choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":null,"stop_reason":null}]'
        self.template = (f'data: {{"id":"{rid}","object":"{kind}","created":0,"model":"{model}",{body}}}\n\n').encode()
        self.next_tick = 0


class Server:
    def __init__(self, config: Config, model: str) -> None:
        self.config = config
        self.model = model
        self.buckets: dict[int, list[Stream]] = defaultdict(list)
        self.tick = 0
        self.start = time.perf_counter()
        self.stall_until = 0.0
        self.log: list[dict] = []
        self.count = 0

    async def ticker(self) -> None:
        while True:
            self.tick += 1
            target = self.start + self.tick * TICK_S
            delay = target - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if time.time() < self.stall_until:
                continue
            due = self.buckets.pop(self.tick, None)
            if due:
                for stream in due:
                    self.step(stream)

    def schedule(self, stream: Stream, delay_s: float) -> None:
        ticks = max(1, round(delay_s / TICK_S))
        stream.next_tick = self.tick + ticks
        self.buckets[stream.next_tick].append(stream)

    def step(self, stream: Stream) -> None:
        conn = stream.conn
        if conn.closed:
            stream.entry["status"] = "aborted"
            return
        cfg = self.config
        out = []
        if stream.sent == 0 and stream.chat and cfg.midstream_error_after != 0:
            out.append(_chunk(_role_chunk(stream.entry["request_id"], self.model)))
        if stream.sent == cfg.midstream_error_after:
            out.append(_chunk(_error_event(int(cfg.midstream_error_code))))
            out.append(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            conn.write(b"".join(out))
            stream.entry["finish_ts"] = time.time()
            stream.entry["status"] = "midstream_error"
            return
        if stream.sent == cfg.cut_after:
            conn.transport.close()
            stream.entry["status"] = "cut"
            return
        out.append(_chunk(stream.template))
        stream.sent += 1
        last = stream.sent >= stream.total
        if last:
            if stream.usage:
                usage = {
                    "id": stream.entry["request_id"],
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": self.model,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": stream.prompt_tokens,
                        "completion_tokens": stream.total,
                        "total_tokens": stream.prompt_tokens + stream.total,
                    },
                }
                out.append(_chunk(b"data: " + json.dumps(usage, separators=(",", ":")).encode() + b"\n\n"))
            out.append(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        now = time.time()  # taken just before the write: a client can never see the chunk earlier
        conn.write(b"".join(out))
        entry = stream.entry
        entry["sends"].append(now)
        if entry["first_token_ts"] is None:
            entry["first_token_ts"] = now
        if last:
            entry["finish_ts"] = now
            entry["status"] = 200
            entry["completion_tokens"] = stream.total
        else:
            self.schedule(stream, cfg.gap_ms / 1000.0)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _error_event(code: int) -> bytes:
    """vLLM's error event (``{"error": {message, type, param, code}}``); 503 reads as its admission refusal."""
    refused = code == 503
    error = {
        "message": "The engine is currently busy and cannot accept new requests." if refused else "simulated error",
        "type": "Service Unavailable" if refused else "InternalServerError",
        "param": None,
        "code": code,
    }
    return b"data: " + json.dumps({"error": error}, separators=(",", ":")).encode() + b"\n\n"


def _role_chunk(rid: str, model: str) -> bytes:
    return (
        f'data: {{"id":"{rid}","object":"chat.completion.chunk","created":0,"model":"{model}","choices":'
        f'[{{"index":0,"delta":{{"role":"assistant","content":""}},"logprobs":null,"finish_reason":null}}]}}'
        f"\n\n"
    ).encode()


class Conn(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.buffer = b""
        self.transport = None
        self.closed = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        self.closed = True

    def write(self, data: bytes) -> None:
        if not self.closed:
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].decode("latin-1").split("\r\n")
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            if len(self.buffer) < head_end + 4 + length:
                return
            body = self.buffer[head_end + 4 : head_end + 4 + length]
            self.buffer = self.buffer[head_end + 4 + length :]
            method, path = head[0].split(" ")[:2]
            self.handle(method, path, headers, body)

    def respond(self, status: int, payload: object, reason: str = "OK") -> None:
        data = json.dumps(payload).encode()
        self.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            f"\r\n".encode()
            + data
        )

    def handle(self, method: str, path: str, headers: dict, body: bytes) -> None:
        server = self.server
        if method == "GET" and path == "/v1/models":
            return self.respond(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
        if method == "GET" and path == "/health":
            return self.respond(200, {})
        if path == "/_bench/log":
            if method == "DELETE":
                server.log.clear()
                return self.respond(200, {})
            return self.respond(200, {"requests": server.log})
        if method == "PUT" and path == "/_bench/config":
            for key, value in json.loads(body or b"{}").items():
                setattr(server.config, key, value)
            return self.respond(200, vars(server.config))
        if method == "PUT" and path == "/_bench/stall":
            server.stall_until = time.time() + float(json.loads(body)["seconds"])
            return self.respond(200, {"stall_until": server.stall_until})
        if method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            return self.generate(path, headers, body)
        return self.respond(
            404,
            {"error": {"message": f"no route {method} {path}", "type": "NotFoundError", "param": None, "code": 404}},
            "Not Found",
        )

    def generate(self, path: str, headers: dict, body: bytes) -> None:
        server, cfg = self.server, self.server.config
        request = json.loads(body)
        chat = path.endswith("chat/completions")
        text = " ".join(m["content"] for m in request.get("messages", [])) if chat else request.get("prompt", "")
        prompt_tokens = len(text.split())
        entry = {
            "request_id": headers.get("x-request-id", f"req-{server.count}"),
            "idempotency_key": headers.get("idempotency-key"),
            "traceparent": headers.get("traceparent"),
            "priority": headers.get("x-drill-priority"),
            "arrival_ts": time.time(),
            "first_token_ts": None,
            "finish_ts": None,
            "sends": [],
            "status": None,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": 0,
            "body_sha256": hashlib.sha256(body).hexdigest(),
        }
        server.log.append(entry)
        server.count += 1
        if cfg.fail_status and server.count % max(1, int(cfg.fail_every)) == 0:
            entry["status"] = cfg.fail_status
            return self.respond(
                int(cfg.fail_status),
                {
                    "error": {
                        "message": "simulated refusal",
                        "type": "Service Unavailable",
                        "param": None,
                        "code": int(cfg.fail_status),
                    }
                },
                "Service Unavailable",
            )
        total = max(1, int(request.get("max_tokens") or 16))
        if not request.get("stream"):
            return self._non_stream(entry, request, chat, prompt_tokens, total)
        usage = bool((request.get("stream_options") or {}).get("include_usage"))
        stream = Stream(self, entry, total, chat, usage, prompt_tokens, server.model)
        start = lambda: (  # noqa: E731
            self.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"),
            server.schedule(stream, cfg.ttft_ms / 1000.0),
        )
        if cfg.hang_headers:
            asyncio.get_running_loop().call_later(cfg.hang_headers, start)
        else:
            start()

    def _non_stream(self, entry, request, chat, prompt_tokens, total) -> None:
        async def later():
            await asyncio.sleep(self.server.config.ttft_ms / 1000.0 + total * self.server.config.gap_ms / 1000.0)
            entry["first_token_ts"] = entry["finish_ts"] = time.time()
            entry["status"] = 200
            entry["completion_tokens"] = total
            self.respond(
                200,
                {
                    "id": entry["request_id"],
                    "object": "chat.completion" if chat else "text_completion",
                    "model": self.server.model,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": total,
                        "total_tokens": prompt_tokens + total,
                    },
                },
            )

        asyncio.get_running_loop().create_task(later())


async def serve(args) -> None:
    server = Server(Config(args.gap_ms, args.ttft_ms), args.model)
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: Conn(server), args.host, args.port, backlog=4096)
    port = srv.sockets[0].getsockname()[1]
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as fh:
            json.dump({"port": port, "pid": os.getpid()}, fh)
        os.replace(tmp, args.ready_file)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ticker = loop.create_task(server.ticker())
    await stop.wait()
    ticker.cancel()
    srv.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-file")
    parser.add_argument("--gap-ms", type=float, default=20.0)
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--model", default="bench-model")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
