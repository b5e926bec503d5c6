"""What the load generator keeps of an answer for ``output_correctness``: its digest and its first tokens."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from loadkit import run_load, scenario

from drill.load.output import HEAD_TOKENS, OutputDigest


def test_the_first_tokens_are_the_streamed_pieces_or_a_body_split_at_whitespace() -> None:
    streamed, whole = OutputDigest(), OutputDigest()
    for piece in ["", "Hello", " wide", " world"]:
        streamed.feed_chunk(b'data: {"choices":[{"index":0,"delta":{"content":"%s"}}]}' % piece.encode())
    whole.feed_body(b'{"choices":[{"index":0,"message":{"content":"Hello wide world"}}]}')
    assert streamed.first_tokens() == ["Hello", " wide", " world"]
    assert whole.first_tokens() == ["Hello", "wide", "world"]
    many = OutputDigest()
    many.feed_body(b'{"choices":[{"index":0,"text":"%s"}]}' % b" ".join([b"w"] * (HEAD_TOKENS + 5)))
    assert many.first_tokens() == ["w"] * HEAD_TOKENS
    torn = OutputDigest()
    torn.feed_chunk(b'data: {"choices":[{"index":0,"delta":{"content":"Hel')
    assert torn.first_tokens() is None


@pytest.mark.integration
def test_capture_outputs_digests_every_temperature_zero_answer(sse_server, tmp_path: Path) -> None:
    sc = scenario(20, out=3, seed=3)
    run = run_load(sse_server.url, sc, 1.0, tmp_path / "run", capture_outputs=True)
    answered = [r for r in run.records if r.ok]
    assert len(answered) >= 5
    assert all(r.output_digest == "sha256:" + hashlib.sha256(b" tok" * 3).hexdigest() for r in answered)
    assert all(r.output_head == [" tok"] * 3 for r in answered)
    hot = run_load(
        sse_server.url,
        scenario(20, out=3, seed=3, sampling={"temperature": 0.5}),
        1.0,
        tmp_path / "hot",
        capture_outputs=True,
    )
    assert hot.records and not any(r.output_digest or r.output_head for r in hot.records)
