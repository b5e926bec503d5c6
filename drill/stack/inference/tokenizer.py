"""The reference stack's tokenizer: one token per whitespace-separated word, plus chat-template tokens.

The rule (used for ``usage`` counts, context-length checks and the load generator's prompts):

* ``count_tokens(text) == len(text.split())``: every whitespace-separated word is one token.
* A chat request renders as a Llama-3-style template whose special tokens count too:
  ``<|begin_of_text|>``, then per message ``<|start_header_id|> role <|end_header_id|> content…
  <|eot_id|>``, then the generation prompt ``<|start_header_id|> assistant <|end_header_id|>``. So
  ``count_chat_tokens(messages) == Σ (count_tokens(content) + 4) + 4``
  (:data:`CHAT_TOKENS_PER_MESSAGE`, :data:`CHAT_TOKENS_PER_CONVERSATION`).
* Generated text is a sequence of vocabulary words, each with a leading space (``" kato"``), so
  ``count_tokens(completion_text) == completion_tokens``.

:func:`make_prompt` builds a deterministic prompt of exactly N tokens (for load generators).
Nothing is computed at import time.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from functools import lru_cache

__all__ = [
    "CHAT_TOKENS_PER_CONVERSATION",
    "CHAT_TOKENS_PER_MESSAGE",
    "chat_tokens",
    "count_chat_tokens",
    "count_tokens",
    "make_prompt",
    "message_text",
    "vocabulary",
]

#: Template tokens around each message: start header, role, end header, end of turn.
CHAT_TOKENS_PER_MESSAGE = 4
#: Template tokens per conversation: begin of text, plus the assistant header (3) that prompts the reply.
CHAT_TOKENS_PER_CONVERSATION = 4

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


@lru_cache(maxsize=1)
def vocabulary() -> tuple[str, ...]:
    """The 4,900 words the stack generates: every two-syllable consonant-vowel pair (``"bada"``…``"zuzu"``)."""
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    return tuple(a + b for a in syllables for b in syllables)


def count_tokens(text: str) -> int:
    """Number of tokens in ``text`` (words)."""
    return len(text.split())


def message_text(content: object) -> str:
    """The text of a chat message's ``content``: a string, or OpenAI content parts (``type: text``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            part.get("text", "") for part in content if isinstance(part, Mapping) and part.get("type") == "text"
        )
    raise ValueError(f"message content must be a string or a list of content parts, got {type(content).__name__}")


def chat_tokens(messages: Iterable[Mapping[str, object]]) -> list[str]:
    """The rendered chat template's tokens (see the module docstring)."""
    tokens = ["<|begin_of_text|>"]
    for message in messages:
        tokens += ["<|start_header_id|>", str(message.get("role", "user")), "<|end_header_id|>"]
        tokens += message_text(message.get("content")).split()
        tokens.append("<|eot_id|>")
    tokens += ["<|start_header_id|>", "assistant", "<|end_header_id|>"]
    return tokens


def count_chat_tokens(messages: Iterable[Mapping[str, object]]) -> int:
    """Prompt tokens of a chat request: Σ (words of content + 4) + 4."""
    total = CHAT_TOKENS_PER_CONVERSATION
    for message in messages:
        total += count_tokens(message_text(message.get("content"))) + CHAT_TOKENS_PER_MESSAGE
    return total


def make_prompt(num_tokens: int, seed: int = 0) -> str:
    """A deterministic prompt of exactly ``num_tokens`` tokens (vocabulary words drawn with ``seed``)."""
    rng = random.Random(seed)
    words = vocabulary()
    return " ".join(words[rng.randrange(len(words))] for _ in range(num_tokens))
