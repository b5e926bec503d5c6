"""The server's own per-request timings (llama.cpp's ``timings``): read from the final streamed chunk and from a
non-streamed body, kept in the request record, and used as server truth for the measurement-truth evidence when
the run has no spans.

The chunks below have the shapes llama.cpp's server sends (``tools/server/server-task.cpp`` in ggml-org/llama.cpp,
``to_json_oaicompat_chat_stream``: with ``stream_options.include_usage`` the last chunk has ``"choices": []``, the
``usage`` and the ``timings`` object; ``result_timings::to_json`` gives its fields).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from drill.checks.truth import measurement_truth_figures
from drill.load.sse import LineKind, classify_line, parse_timings, parse_usage
from drill.rundir.evidence import RunEvidence
from drill.rundir.records import RequestRecord, ServerTimings, read_records
from drill.traces.join import timings_truth

TIMINGS = {
    "cache_n": 0,
    "prompt_n": 41,
    "prompt_ms": 12.5,
    "prompt_per_token_ms": 0.305,
    "prompt_per_second": 3280.0,
    "predicted_n": 6,
    "predicted_ms": 48.0,
    "predicted_per_token_ms": 8.0,
    "predicted_per_second": 125.0,
}
_ENVELOPE = (
    '"created":1764000000,"id":"chatcmpl-abc","model":"tiny","system_fingerprint":"b7000-f00",'
    '"object":"chat.completion.chunk"'
)


def _content(text: str) -> str:
    return f'data: {{"choices":[{{"finish_reason":null,"index":0,"delta":{{"content":"{text}"}}}}],{_ENVELOPE}}}\n\n'


FINISH = f'data: {{"choices":[{{"finish_reason":"length","index":0,"delta":{{}}}}],{_ENVELOPE}}}\n\n'
USAGE = (
    f'data: {{"choices":[],{_ENVELOPE},"usage":{{"completion_tokens":6,"prompt_tokens":41,"total_tokens":47}},'
    f'"timings":{json.dumps(TIMINGS, separators=(",", ":"))}}}\n\n'
)
BODY = json.dumps(
    {
        "choices": [{"finish_reason": "length", "index": 0, "message": {"role": "assistant", "content": "a b c"}}],
        "created": 1764000000,
        "model": "tiny",
        "object": "chat.completion",
        "usage": {"completion_tokens": 6, "prompt_tokens": 41, "total_tokens": 47},
        "id": "chatcmpl-abc",
        "timings": TIMINGS,
    }
).encode()


def test_the_final_llamacpp_chunk_is_the_usage_line_and_carries_the_timings() -> None:
    line = USAGE.strip().encode()
    assert classify_line(line) is LineKind.USAGE
    assert parse_usage(line) == (41, 6)
    assert parse_timings(line) == ServerTimings(
        prompt_n=41, prompt_ms=12.5, predicted_n=6, predicted_ms=48.0, cache_n=0
    )
    assert parse_timings(BODY) == parse_timings(line)  # the non-streamed body has the same object
    assert parse_timings(_content("x").strip().encode()) is None  # vLLM-style chunks: no timings
    assert parse_timings(b'data: {"timings": {"prompt_n": 3}}') is None  # not a whole timings object


def test_the_record_keeps_the_timings_through_its_json() -> None:
    timings = ServerTimings(prompt_n=41, prompt_ms=12.5, predicted_n=6, predicted_ms=48.0)
    record = _record("r1", ttft_ms=30.0, e2e_ms=90.0, timings=timings)
    back = RequestRecord.from_dict(json.loads(record.to_json()))
    assert back.server_timings == timings
    assert RequestRecord.from_dict(json.loads(_record("r2", 1.0, 2.0, None).to_json())).server_timings is None


def _record(rid: str, ttft_ms: float, e2e_ms: float, timings: ServerTimings | None) -> RequestRecord:
    return RequestRecord(
        request_id=rid,
        logical_id=rid,
        pool="chat",
        attempt=1,
        intended_ts=1764000000.0,
        sent_ts=1764000000.002,
        schedule_lag_ms=2.0,
        status=200,
        ttft_ms=ttft_ms,
        e2e_ms=e2e_ms,
        completion_tokens=6,
        trace_id=rid * 4,
        server_timings=timings,
    )


def test_without_spans_the_servers_timings_are_the_measurement_truth(tmp_path: Path) -> None:
    records = [
        _record(f"r{i}", ttft_ms=20.0 + i, e2e_ms=80.0 + i, timings=ServerTimings(10, 10.0, 6, 60.0)) for i in range(5)
    ] + [_record("plain", 25.0, 85.0, None)]  # no timings: not in the truth
    truth = timings_truth(records)
    assert truth.source == "server_timings" and truth.joined == 5
    # client from the send: ttft 20+i - 2 lag = 18+i; server TTFT = prompt_ms 10 -> 8+i; E2E 78+i - 70 = 8+i
    assert truth.ttft_diff_ms == {"p50": 10.0, "p95": pytest.approx(11.8), "p99": pytest.approx(11.96)}
    assert truth.e2e_diff_ms["p50"] == 10.0
    (tmp_path / "requests.jsonl").write_text("".join(r.to_json() + "\n" for r in records))
    (tmp_path / "journal.jsonl").write_text("")
    observed, notes, refs = measurement_truth_figures(RunEvidence(tmp_path))  # no spans.jsonl at all
    assert observed["measurement_truth.joined"] == 5 and observed["measurement_truth.ttft_diff_ms.p50"] == 10.0
    assert "with the server's own timings" in notes[0] and refs


class _LlamaCppLike(BaseHTTPRequestHandler):
    """Answers chat completions with llama.cpp's chunk shapes (streamed) or body (not streamed)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if request.get("stream"):
            body = ("".join(_content(w) for w in "abcdef") + FINISH + USAGE + "data: [DONE]\n\n").encode()
            kind = "text/event-stream"
        else:
            body, kind = BODY, "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.mark.integration
@pytest.mark.parametrize("stream", [True, False])
def test_drill_load_keeps_the_timings_a_llamacpp_like_server_sends(tmp_path: Path, stream: bool) -> None:
    """The load child's own parser (streamed and not) on a real socket: every record has the server's timings."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _LlamaCppLike)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "seed: 3\narrival: {process: poisson, rate: 10}\npools:\n"
        f"  - {{name: chat, stream: {str(stream).lower()}, input_tokens: {{dist: fixed, value: 30}}, "
        "output_tokens: {dist: fixed, value: 6}}\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-m", "drill", "load", str(scenario), "--target", f"http://127.0.0.1:{server.server_port}"]
            + ["--duration", "1s", "--model", "tiny", "--tokenizer", "words", "--out", str(tmp_path / "run")]
            + ["--no-progress", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr[-3000:]
    records = list(read_records(tmp_path / "run" / "requests.jsonl"))
    assert records and all(r.ok for r in records)
    assert all(r.server_timings == ServerTimings(41, 12.5, 6, 48.0, 0) for r in records)
    assert all(r.prompt_tokens == 41 for r in records)
