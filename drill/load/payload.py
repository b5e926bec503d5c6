"""Request bodies and headers: deterministic prompts, W3C trace context, idempotency keys.

Bodies are built by the load generator just before an arrival is due (and by
tests, to compare request sets); headers once per attempt. The body of a
logical request depends only on the scenario, the seed, the model and the
request's logical id, so the same seed gives byte-identical bodies (and
``payload_digest``) across runs, and retries re-send the same bytes.

Prompts are made of common English words, one whitespace-separated word per
token: the reference stack counts one token per word plus a small chat-template
overhead (``drill/stack/inference/tokenizer.py``), and BPE tokenizers such as Llama's
encode most of these words as one token each. A chat request's word budget
leaves room for the chat template's own tokens (Llama-3 style: 4 per message and
4 per conversation, the same rule as ``drill/stack/inference/tokenizer.py``), so the
planned input length is the whole context the server sees, as in the Azure
traces' ``ContextTokens``. The token counts actually billed are read back from
the server's ``usage``.

Against a real tokenizer one word is not one token: :mod:`drill.load.tokenizing`
fits each planned prompt at plan time and hands ``build_body`` a
:class:`PromptShape` (how many corpus words, and how many one-token filler
words), so the prompt the server counts is the planned length.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import zlib
from dataclasses import dataclass

from drill.spec.scenario import Endpoint, Pool

__all__ = [
    "CHAT_TOKENS_PER_CONVERSATION",
    "CHAT_TOKENS_PER_MESSAGE",
    "PromptShape",
    "PromptText",
    "build_body",
    "completion_prompt",
    "prompt_parts",
    "corpus_vocabulary",
    "words_rule_shape",
    "attempt_headers",
    "new_trace_ids",
    "traceparent",
    "endpoint_path",
    "payload_digest",
]

_WORDS = ["the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "they", "you", "were", "her", "all", "she", "there", "would", "their", "we", "him", "been", "has", "when", "who", "will", "more", "no", "if", "out", "so", "said", "what", "up", "its", "about", "into", "than", "them", "can", "only", "other", "new", "some", "could", "time", "these", "two", "may", "then", "do", "first", "any", "my", "now", "such", "like", "our", "over", "man", "me", "even", "most", "made", "after", "also", "did", "many", "before", "must", "through", "back", "years", "where", "much", "your", "way", "well", "down", "should", "because", "each", "just", "those", "people", "how", "too", "little", "state", "good", "very", "make", "world", "still", "own", "see", "men", "work", "long", "get", "here", "between", "both", "life", "being", "under", "never", "day", "same", "another", "know", "while", "last", "might", "us", "great", "old", "year", "off", "come", "since", "against", "go", "came", "right", "used", "take", "three", "place", "small", "found", "part", "water", "city", "point", "line", "house", "world", "river", "light", "number", "sound", "word", "story", "music", "table", "paper", "answer", "garden", "window", "market", "letter", "course", "order", "field", "open", "early", "system", "report", "power", "money", "night", "green", "plan", "study", "rest", "close", "road", "common", "simple", "short", "clear", "round", "voice"]  # noqa: E501  # fmt: skip

_CORPUS_WORDS = 1 << 16
#: Chat-template tokens (Llama-3 style): per message (start/end header, role, end of turn) and per conversation.
CHAT_TOKENS_PER_MESSAGE = 4
CHAT_TOKENS_PER_CONVERSATION = 4


class PromptText:
    """A seeded corpus of words; a request's text is a slice of it at an offset fixed by its id."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(f"{seed}:corpus")
        words = [rng.choice(_WORDS) for _ in range(_CORPUS_WORDS)]
        self._doubled = words + words
        self.seed = seed

    def words(self, count: int, key: str) -> str:
        """``count`` words (space-separated) starting at the corpus offset of ``key``."""
        return " ".join(self.word_list(count, key))

    def word_list(self, count: int, key: str) -> list[str]:
        """The words of :meth:`words`, one list item each."""
        if count <= 0:
            return []
        start = zlib.crc32(f"{self.seed}:{key}".encode()) % _CORPUS_WORDS
        if count <= _CORPUS_WORDS:
            return self._doubled[start : start + count]
        reps = self._doubled[start : start + _CORPUS_WORDS]
        return (reps * (count // _CORPUS_WORDS + 1))[:count]


def corpus_vocabulary() -> tuple[str, ...]:
    """The distinct words prompts are made of (their token costs are measured once per tokenizer)."""
    return tuple(dict.fromkeys(_WORDS))


@dataclass(frozen=True, slots=True)
class PromptShape:
    """A fitted prompt's make-up (from :mod:`drill.load.tokenizing`), instead of the one-token-per-word rule.

    ``prefix_words`` shared words of the pool's prefix, then the logical id, ``unique_words`` corpus
    words and ``fill`` times ``filler`` (a word the tokenizer counts as exactly one token).
    """

    prefix_words: int
    unique_words: int
    fill: int = 0
    filler: str = ""


def endpoint_path(endpoint: Endpoint) -> str:
    return "/v1/chat/completions" if endpoint is Endpoint.CHAT else "/v1/completions"


def words_rule_shape(pool: Pool, input_tokens: int) -> PromptShape:
    """The embedded stack's rule: one token per word, Llama-3 chat-template tokens counted as the stack does."""
    chat = pool.endpoint is Endpoint.CHAT
    messages = 2 if chat and pool.prefix_tokens else 1
    budget = input_tokens - (CHAT_TOKENS_PER_CONVERSATION + CHAT_TOKENS_PER_MESSAGE * messages if chat else 0)
    prefix_count = max(0, min(pool.prefix_tokens, budget - 1))
    return PromptShape(prefix_count, max(1, budget - prefix_count) - 1)


def prompt_parts(pool: Pool, logical_id: str, shape: PromptShape, text: PromptText) -> tuple[str, str]:
    """The prompt's shared prefix (empty for none) and its unique part (the logical id first)."""
    prefix = text.words(shape.prefix_words, f"prefix:{pool.name}")
    unique = f"{logical_id} {text.words(shape.unique_words, logical_id)}".rstrip()
    if shape.fill:
        unique += f" {shape.filler}" * shape.fill
    return prefix, unique


def completion_prompt(prefix: str, unique: str) -> str:
    """A completions request's ``prompt``: the prefix, then the unique part."""
    return f"{prefix} {unique}" if prefix else unique


def build_body(
    pool: Pool,
    model: str,
    logical_id: str,
    input_tokens: int,
    output_tokens: int,
    text: PromptText,
    shape: PromptShape | None = None,
) -> bytes:
    """The exact JSON body bytes of one logical request (ASCII, compact separators).

    The prompt is the pool's shared prefix words (its system prompt, for
    prefix-cache hits), then the logical id and unique words: ``input_tokens``
    tokens in all, chat template included. ``shape`` is the fitted make-up (token-exact
    prompts); without it, the one-token-per-word rule (:func:`words_rule_shape`).
    """
    chat = pool.endpoint is Endpoint.CHAT
    prefix, unique = prompt_parts(pool, logical_id, shape or words_rule_shape(pool, input_tokens), text)
    body: dict[str, object] = {"model": model}
    if chat:
        messages = [{"role": "system", "content": prefix}] if prefix else []
        body["messages"] = messages + [{"role": "user", "content": unique}]
    else:
        body["prompt"] = completion_prompt(prefix, unique)
    body.update(_generation_fields(pool, output_tokens))
    return json.dumps(body, separators=(",", ":")).encode("ascii")


def _generation_fields(pool: Pool, output_tokens: int) -> dict[str, object]:
    s = pool.sampling
    fields: dict[str, object] = {"max_tokens": output_tokens, "stream": pool.stream}
    if pool.stream:
        fields["stream_options"] = {"include_usage": True}  # final usage chunk (§3.1)
    fields.update(temperature=s.temperature, top_p=s.top_p)
    if s.seed is not None:
        fields["seed"] = s.seed
    if s.ignore_eos:
        fields["ignore_eos"] = True
    if pool.priority:
        fields["priority"] = pool.priority  # vLLM's request priority (lower = more urgent)
    return fields


def payload_digest(body: bytes) -> str:
    """``sha256:<hex>`` of the exact body bytes."""
    return "sha256:" + hashlib.sha256(body).hexdigest()


def new_trace_ids() -> tuple[str, str]:
    """A fresh W3C trace id (32 hex) and parent span id (16 hex), never all zeros."""
    trace_id, span_id = os.urandom(16).hex(), os.urandom(8).hex()
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return new_trace_ids()
    return trace_id, span_id


def traceparent(trace_id: str, span_id: str) -> str:
    """The ``traceparent`` header value, sampled flag set."""
    return f"00-{trace_id}-{span_id}-01"


def attempt_headers(
    *,
    trace_id: str,
    span_id: str,
    idempotency_key: str,
    request_id: str,
    priority: int,
    stream: bool,
    extra: dict[str, str],
) -> dict[str, str]:
    """Headers of one attempt: JSON, SSE accept, trace context, idempotency, request id, priority."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream" if stream else "application/json",
        "traceparent": traceparent(trace_id, span_id),
        "Idempotency-Key": idempotency_key,
        "X-Request-Id": request_id,
        "X-Drill-Priority": str(priority),
    }
    headers.update(extra)
    return headers
