"""More token-exact evidence: the achieved prompt tokens of every endpoint and stream shape reach the record."""

from __future__ import annotations

import json

import pytest

from drill.load.sse import LineKind, carries_usage, classify_line, parse_usage
from drill.spec.scenario import Scenario
from tests.load.test_token_exact import FakeServer, _achieved, _bpe, _fit


@pytest.fixture(scope="module")
def meta_bpe():  # -> tokenizers.Tokenizer: the SentencePiece-like one of tests/load/test_token_exact.py
    return _bpe(420, byte_level=False)


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


class JoinedSystemPrompt(FakeServer):
    """A template that puts the system prompt right after its header's newline, with a SentencePiece-like
    tokenizer (Metaspace): tokenized alone the prompt's first word gets the word prefix ``▁``, in the conversation
    it does not, so its tokens there are not its count alone, by an amount that depends on that word. The user
    turn follows a space, as a lone tokenize call sees it."""

    def prompt_tokens(self, body: dict) -> int:
        if "messages" not in body:
            return super().prompt_tokens(body)
        turns = [f"system\n{m['content']}" if m["role"] == "system" else f" {m['content']}" for m in body["messages"]]
        return 1 + self.count("".join(turns) + " assistant")


@pytest.mark.parametrize("seed", [1, 5, 6])
def test_the_system_prompt_is_counted_as_the_template_joins_it(meta_bpe, tmp_path, seed) -> None:
    """Each pool's system prompt is other words: the template's overhead is measured per pool, with its own."""
    pools = [
        {
            "name": "chat",
            "share": 0.5,
            "prefix_tokens": 60,
            "input_tokens": {"dist": "uniform", "min": 120, "max": 400},
        },
        {"name": "other", "share": 0.5, "prefix_tokens": 90, "input_tokens": {"dist": "fixed", "value": 200}},
    ]
    out = {"dist": "fixed", "value": 4}
    scenario = Scenario.model_validate(
        {
            "seed": seed,
            "arrival": {"process": "poisson", "rate": 40},
            "pools": [{**p, "output_tokens": out} for p in pools],
        }
    )
    server = JoinedSystemPrompt(meta_bpe)
    schedule, fit = _fit(scenario, server, tmp_path)
    pairs = _achieved(scenario, server, schedule, fit)
    off = [(r.logical_id, p, a) for r, (p, a) in zip(schedule.requests, pairs) if p != a]
    assert not off and not fit.unfit, off[:5]
    assert set(fit.overheads) == {"chat", "other"}


class _Stream:
    """An ``http.client.HTTPResponse`` at the transport seam: its lines, then EOF."""

    def __init__(self, lines: list[bytes]) -> None:
        self._lines = [line + b"\n" for line in lines]

    def readline(self) -> bytes:
        return self._lines.pop(0) if self._lines else b""


def test_the_replay_reads_usage_from_llamacpps_last_content_chunk() -> None:
    import time

    from drill.load.replay import _read_stream

    first = b'data: {"choices":[{"text":" the","index":0,"finish_reason":null}],"object":"text_completion"}'
    stream = _Stream([first, LLAMACPP_LAST_COMPLETION_CHUNK, b"data: [DONE]"])
    out = _read_stream(stream, time.monotonic(), time.monotonic() + 60)  # type: ignore[arg-type]
    assert out["completion_tokens"] == 2 and out["chunks"] == 2 and "error" not in out


def test_an_unfit_plan_below_the_templates_own_tokens_says_so() -> None:
    from drill.load.tokenizing import PromptFit, UnfitPrompt

    # a Qwen-style template adds a 50-token default system prompt: 40 planned tokens cannot be met
    fit = PromptFit(
        "server", "http://127.0.0.1:8080/tokenize", overheads={"chat": 50}, unfit=(UnfitPrompt("c-1", 40, 58),)
    )
    assert "could not be made exact (worst c-1: 58 for 40 planned)" in fit.describe()
    assert "the chat template alone costs up to 50 tokens" in fit.describe()
    roomy = PromptFit("server", "x", overheads={"chat": 8}, unfit=(UnfitPrompt("c-2", 300, 301),))
    assert "template alone" not in roomy.describe()
