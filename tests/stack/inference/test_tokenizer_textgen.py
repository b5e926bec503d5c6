"""The stack's tokenizer rule and its deterministic text generator."""

from __future__ import annotations

import statistics

from drill.stack.inference.textgen import (
    CONV_GENERATED_QUANTILES,
    TokenSampler,
    natural_length,
    prompt_seed,
    token_text,
)
from drill.stack.inference.tokenizer import (
    CHAT_TOKENS_PER_CONVERSATION,
    CHAT_TOKENS_PER_MESSAGE,
    chat_tokens,
    count_chat_tokens,
    count_tokens,
    make_prompt,
    vocabulary,
)


def test_one_token_per_word_and_chat_template_overhead() -> None:
    assert count_tokens("  hello   big\nworld ") == 3
    assert count_tokens("") == 0
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "one two"}, {"type": "image_url"}]},
    ]
    assert count_chat_tokens(messages) == (2 + CHAT_TOKENS_PER_MESSAGE) * 2 + CHAT_TOKENS_PER_CONVERSATION == 16
    assert len(chat_tokens(messages)) == count_chat_tokens(messages)


def test_make_prompt_is_exact_and_deterministic() -> None:
    prompt = make_prompt(300, seed=9)
    assert count_tokens(prompt) == 300
    assert prompt == make_prompt(300, seed=9) != make_prompt(300, seed=10)
    assert set(prompt.split()) <= set(vocabulary())


def test_generated_text_counts_as_its_tokens() -> None:
    sampler = TokenSampler(prompt_seed(["a", "b"]))
    text = "".join(token_text(sampler.next_token()) for _ in range(50))
    assert count_tokens(text) == 50
    again = TokenSampler(prompt_seed(["a", "b"]))
    assert text == "".join(token_text(again.next_token()) for _ in range(50))


def test_natural_length_follows_the_conversation_trace() -> None:
    lengths = [natural_length(i / 2000) for i in range(2000)]
    assert min(lengths) == CONV_GENERATED_QUANTILES[0]
    assert statistics.median(lengths) == CONV_GENERATED_QUANTILES[10]  # 129, the trace's median
    assert natural_length(0.999999) <= CONV_GENERATED_QUANTILES[-1]
