"""Deterministic output of the virtual model: which tokens a request generates and when it stops.

Called by the API layer when it builds a :class:`~drill.stack.inference.request.Request` (a sampler and a
natural stop length) and by the executor once per sampled token.

* Temperature 0 (greedy): the seed is a stable hash of the prompt's tokens alone, so the same
  request always yields the same tokens (a replay compares outputs exactly).
* Temperature > 0 with ``seed``: a stable hash of (prompt, seed, temperature); reproducible.
* Temperature > 0 without ``seed``: the replica's own seeded stream (``StackConfig.seed`` and the
  replica index), so a whole run replays identically on a fresh stack but requests differ.

The natural length (where the model would emit EOS) is drawn from the Azure 2023 conversation
trace's generated-token quantiles (docs/serving-facts.md §7.1) by inverse CDF with log-linear
interpolation; ``max_tokens`` cuts it short (``length``), ``ignore_eos`` disables it.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence

from drill.stack.inference.tokenizer import vocabulary

__all__ = ["CONV_GENERATED_QUANTILES", "TokenSampler", "natural_length", "stable_seed", "token_text"]

#: 5 % quantiles q0..q100 of GeneratedTokens in the Azure 2023 conversation trace (§7.1).
CONV_GENERATED_QUANTILES = (
    7,
    41,
    54,
    67,
    77,
    85,
    91,
    96,
    103,
    113,
    129,
    151,
    177,
    217,
    384,
    395,
    400,
    411,
    424,
    451,
    1000,
)


def stable_seed(*parts: object) -> int:
    """A 64-bit seed from ``parts`` that is the same in every process (unlike ``hash``)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def prompt_seed(prompt_tokens: Sequence[object]) -> int:
    """The greedy (temperature 0) seed of a prompt: a stable hash of its tokens."""
    hasher = hashlib.blake2b(digest_size=8)
    for token in prompt_tokens:
        hasher.update(str(token).encode())
        hasher.update(b"\x00")
    return int.from_bytes(hasher.digest(), "big")


class TokenSampler:
    """Draws a request's output token ids (indices into :func:`vocabulary`) from its seed."""

    __slots__ = ("_rng", "_random", "_size")

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._random = self._rng.random
        self._size = len(vocabulary())

    def next_token(self) -> int:
        """The next token id (uniform over the vocabulary)."""
        return int(self._random() * self._size)

    def natural_length(self) -> int:
        """Where this request's text ends on its own (tokens), from the same seeded stream."""
        return natural_length(self._rng.random())


def natural_length(u: float) -> int:
    """Inverse CDF of :data:`CONV_GENERATED_QUANTILES` at ``u`` in [0, 1), log-linear between quantiles."""
    position = u * (len(CONV_GENERATED_QUANTILES) - 1)
    index = min(int(position), len(CONV_GENERATED_QUANTILES) - 2)
    low, high = CONV_GENERATED_QUANTILES[index], CONV_GENERATED_QUANTILES[index + 1]
    fraction = position - index
    return max(1, round(math.exp(math.log(low) + fraction * (math.log(high) - math.log(low)))))


def token_text(token_id: int) -> str:
    """The text of one output token: a space and a vocabulary word."""
    return " " + vocabulary()[token_id]
