"""More token-exact evidence: the achieved prompt tokens of every endpoint and stream shape reach the record."""

from __future__ import annotations

import json

from drill.load.sse import LineKind, carries_usage, classify_line, parse_usage

# llama.cpp's streamed /v1/completions (b11434, as its server sent it): no separate usage chunk; the last content
# chunk carries finish_reason, usage and timings together.
LLAMACPP_LAST_COMPLETION_CHUNK = (
    b'data: {"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}],"created":1796129218,'
    b'"model":"tiny-bpe-12k","system_fingerprint":"b0-unknown","object":"text_completion","usage":{'
    b'"completion_tokens":2,"prompt_tokens":176,"total_tokens":178,"prompt_tokens_details":{"cached_tokens":0}},'
    b'"id":"chatcmpl-vn4p8h9K9cet441fNgDrG512OIO5CAB9","timings":{"cache_n":0,"prompt_n":176,"prompt_ms":1.25,'
    b'"predicted_n":2,"predicted_ms":0.291}}'
)


def test_a_content_chunk_that_carries_usage_is_read_for_its_prompt_tokens() -> None:
    line = LLAMACPP_LAST_COMPLETION_CHUNK
    assert classify_line(line) is LineKind.CONTENT  # it still counts as a chunk, as in vllm bench serve
    assert carries_usage(line) and parse_usage(line) == (176, 2)


def test_a_generated_text_that_spells_usage_is_not_usage() -> None:
    chunk = {"choices": [{"text": 'say "usage": 3', "index": 0, "finish_reason": None}], "object": "text_completion"}
    line = b"data: " + json.dumps(chunk, separators=(",", ":")).encode()
    assert classify_line(line) is LineKind.CONTENT and not carries_usage(line)
    assert not carries_usage(b'data: {"choices":[{"text":"x"}],"usage":null}')
