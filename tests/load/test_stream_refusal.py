"""A refusal inside a stream: HTTP 200, then ``data: {"error": {..., "code": 503}}`` (vLLM's late admission check).

Unit tests at the transport seam: the SSE classification of the event's code, and the load client's line reader
(``drill.load.child.streaming``) fed the bytes vLLM sends. ``test_load_driver.py`` runs the same through a real
server process.
"""

from __future__ import annotations

import json

import pytest

from drill.load.child.streaming import ClientOutcome, _SseLines
from drill.load.sse import parse_error_code
from drill.rundir.records import ErrorClass, RequestRecord, classify_stream_error

#: What vLLM streams when ``AsyncLLM`` refuses a request whose 200 has already gone out.
VLLM_REFUSAL = (
    b'data: {"error": {"message": "The engine is currently busy and cannot accept new requests. Please try again '
    b'later or on a different instance.", "type": "Service Unavailable", "param": null, "code": 503}}\n\n'
    b"data: [DONE]\n\n"
)


@pytest.mark.parametrize(
    "line,code",
    [
        (b'data: {"error":{"message":"busy","type":"Service Unavailable","param":null,"code":503}}', 503),
        (b'{"error": {"message": "slow down", "code": 429}}', 429),
        (b'data: {"object":"error","message":"old","type":"BadRequestError","code":400}', 400),  # legacy flat
        (b'data: {"error":{"message":"x","code":"503"}}', 503),
        (b'data: {"error":{"message":"x","code":"rate_limit_exceeded"}}', None),  # OpenAI's string codes
        (b'data: {"error":{"message":"x","code":true}}', None),
        (b'data: {"error":{"message":"x"}}', None),
        (b"data: not json", None),
    ],
)
def test_the_error_events_code_is_read(line: bytes, code: int | None) -> None:
    assert parse_error_code(line) == code


def test_a_429_or_503_code_is_a_refusal_anything_else_a_mid_stream_error() -> None:
    assert classify_stream_error(503) is ErrorClass.REFUSED
    assert classify_stream_error(429) is ErrorClass.REFUSED
    assert classify_stream_error(500) is ErrorClass.MID_STREAM_ERROR
    assert classify_stream_error(None) is ErrorClass.MID_STREAM_ERROR


def _read(*reads: bytes) -> ClientOutcome:
    outcome = ClientOutcome(sent_at=0.0, status=200)
    lines = _SseLines(outcome)
    for i, data in enumerate(reads):
        if lines.feed(data, float(i + 1)):
            break
    return outcome


def test_the_client_counts_a_200_with_a_503_event_as_refused_without_retry_after() -> None:
    outcome = _read(VLLM_REFUSAL)
    assert outcome.error is ErrorClass.REFUSED and outcome.stream_error_code == 503
    assert outcome.retry_after_s is None and outcome.chunk_times == [] and outcome.end_at == 1.0
    assert "code 503" in outcome.detail and "currently busy" in outcome.detail


def test_the_event_split_across_reads_is_still_a_refusal() -> None:
    outcome = _read(VLLM_REFUSAL[:40], VLLM_REFUSAL[40:90], VLLM_REFUSAL[90:])
    assert outcome.error is ErrorClass.REFUSED and outcome.stream_error_code == 503


def test_an_engine_error_after_tokens_stays_a_mid_stream_error() -> None:
    chunk = b'data: {"id":"c","object":"text_completion","choices":[{"index":0,"text":"a"}]}\n\n'
    error = b'data: {"error":{"message":"EngineCore died.","type":"InternalServerError","code":500}}\n\n'
    outcome = _read(chunk, chunk, error + b"data: [DONE]\n\n")
    assert outcome.error is ErrorClass.MID_STREAM_ERROR and outcome.stream_error_code == 500
    assert len(outcome.chunk_times) == 2


def test_the_code_survives_the_record_round_trip() -> None:
    record = RequestRecord(
        request_id="r-1",
        logical_id="l-1",
        pool="chat",
        attempt=1,
        intended_ts=1.0,
        sent_ts=1.0,
        schedule_lag_ms=0.0,
        status=200,
        error=ErrorClass.REFUSED,
        stream_error_code=503,
    )
    again = RequestRecord.from_dict(json.loads(record.to_json()))
    assert again == record and not again.ok
