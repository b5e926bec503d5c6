"""An OTLP/HTTP trace receiver that writes normalized spans to ``spans.jsonl``.

Started by the runner on ``127.0.0.1:4318`` by default (``otlp.host``/``otlp.port``
in the drill; port 0 picks a free one). Accepts ``POST /v1/traces`` with
protobuf (``application/x-protobuf``) or JSON (``application/json``) bodies,
optionally gzip/deflate-compressed, and answers with an
``ExportTraceServiceResponse`` in the request's encoding. ``/v1/metrics`` and
``/v1/logs`` are accepted and dropped, so an exporter configured for all
signals does not log errors. Spans are appended and flushed per export.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from drill.errors import TargetError
from drill.traces.otlp import OtlpDecodeError, decode_body, decode_request, encode_response, normalize

__all__ = ["OtlpReceiver"]

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024


class OtlpReceiver:
    """Runs in a background thread; ``endpoint`` is what servers put in OTEL_EXPORTER_OTLP_TRACES_ENDPOINT."""

    def __init__(self, spans_path: Path, host: str = "127.0.0.1", port: int = 4318) -> None:
        self.spans_path = spans_path
        self._lock = threading.Lock()
        self._out = open(spans_path, "a", encoding="utf-8")
        self.spans_received = 0
        self.exports_received = 0
        self.rejected = 0
        try:
            self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        except OSError as exc:
            self._out.close()
            raise TargetError(
                f"cannot listen for OTLP spans on {host}:{port}: {exc.strerror or exc}",
                hint="set otlp.port to a free port (0 picks one) or stop what uses it",
            ) from exc
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def endpoint(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}/v1/traces"

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            self._out.close()

    def accept(self, spans: list[dict]) -> None:
        lines = "".join(json.dumps(s, separators=(",", ":")) + "\n" for s in spans)
        with self._lock:
            if self._out.closed:
                return
            self._out.write(lines)
            self._out.flush()
            self.spans_received += len(spans)
            self.exports_received += 1


def _handler_for(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "llm-drill-otlp"

        def log_message(self, fmt: str, *args: object) -> None:
            log.debug("otlp: " + fmt, *args)

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self._reply(413, b"export too large", "text/plain")
                return
            body = self.rfile.read(length)
            if self.path.rstrip("/") in ("/v1/metrics", "/v1/logs"):
                self._reply(200, b"{}", "application/json")
                return
            if self.path.rstrip("/") != "/v1/traces":
                self._reply(404, b"not found", "text/plain")
                return
            self._traces(body)

        def _traces(self, body: bytes) -> None:
            content_type = self.headers.get("Content-Type")
            try:
                raw = decode_body(body, self.headers.get("Content-Encoding"))
                spans = normalize(decode_request(raw, content_type))
            except OtlpDecodeError as exc:
                receiver.rejected += 1
                self._reply(400, str(exc).encode(), "text/plain")
                return
            receiver.accept(spans)
            payload, media = encode_response(content_type)
            self._reply(200, payload, media)

        def _reply(self, status: int, payload: bytes, media: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", media)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler
