"""What the load generator keeps of an answer for ``output_correctness``: its digest and its first tokens."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from loadkit import run_load, scenario

from drill.load.output import HEAD_TOKENS, OutputDigest, token_digest
from drill.load.replay import choose_repeats
from drill.load.schedule import build_schedule


def test_the_first_tokens_are_the_streamed_pieces_or_a_body_split_at_whitespace() -> None:
    streamed, whole = OutputDigest(), OutputDigest()
    for piece in ["", "Hello", " wide", " world"]:
        streamed.feed_chunk(b'data: {"choices":[{"index":0,"delta":{"content":"%s"}}]}' % piece.encode())
    whole.feed_body(b'{"choices":[{"index":0,"message":{"content":"Hello wide world"}}]}')
    assert streamed.first_tokens(keep_text=True) == ["Hello", " wide", " world"]
    assert whole.first_tokens(keep_text=True) == ["Hello", "wide", "world"]
    assert streamed.first_tokens() == [token_digest(t) for t in ["Hello", " wide", " world"]]  # no text kept
    many = OutputDigest()
    many.feed_body(b'{"choices":[{"index":0,"text":"%s"}]}' % b" ".join([b"w"] * (HEAD_TOKENS + 5)))
    assert many.first_tokens(keep_text=True) == ["w"] * HEAD_TOKENS
    torn = OutputDigest()
    torn.feed_chunk(b'data: {"choices":[{"index":0,"delta":{"content":"Hel')
    assert torn.first_tokens() is None


def test_repeats_resend_baseline_bodies_from_temperature_zero_pools_only() -> None:
    sc = scenario(20, seed=3)
    repeats = choose_repeats(sc, 10.0, 3, (0.0, 4.0), 0.25)
    offsets = {r.logical_id: r.offset_s for r in build_schedule(sc, 10.0, 3).requests}
    later = [i for i, at in offsets.items() if at >= 4.0]
    assert 0.1 < len(repeats) / len(later) < 0.45  # about a quarter of the later requests
    assert all(offsets[i] >= 4.0 and offsets[src] < 4.0 for i, src in repeats.items())
    assert repeats == choose_repeats(sc, 10.0, 3, (0.0, 4.0), 0.25)  # seeded
    assert choose_repeats(scenario(20, seed=3, sampling={"temperature": 0.5}), 10.0, 3, (0.0, 4.0), 0.25) == {}
    assert choose_repeats(sc, 10.0, 3, (0.0, 4.0), 0.0) == {}


@pytest.mark.integration
def test_capture_outputs_digests_every_temperature_zero_answer(sse_server, tmp_path: Path) -> None:
    sc = scenario(20, out=3, seed=3, input_tokens={"dist": "uniform", "min": 20, "max": 60})
    repeats = choose_repeats(sc, 1.0, 3, (0.0, 0.5), 0.5)
    run = run_load(sse_server.url, sc, 1.0, tmp_path / "run", capture_outputs=True, repeat_of=repeats)
    answered = [r for r in run.records if r.ok]
    assert len(answered) >= 5
    by_id = {r.logical_id: r for r in run.records}
    resent = [(by_id[i], by_id[src]) for i, src in repeats.items() if i in by_id and src in by_id]
    assert resent and all(a.payload_digest == b.payload_digest for a, b in resent)  # the very same bytes
    assert all(a.planned_input_tokens == b.planned_input_tokens for a, b in resent)
    assert len({r.payload_digest for r in run.records}) == len(by_id) - len(resent)  # every other body is new
    assert all(r.output_digest == "sha256:" + hashlib.sha256(b" tok" * 3).hexdigest() for r in answered)
    assert all(r.output_head == [token_digest(" tok")] * 3 for r in answered)
    hot = run_load(
        sse_server.url,
        scenario(20, out=3, seed=3, sampling={"temperature": 0.5}),
        1.0,
        tmp_path / "hot",
        capture_outputs=True,
    )
    assert hot.records and not any(r.output_digest or r.output_head for r in hot.records)
