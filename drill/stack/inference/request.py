"""One generation request inside the engine, with vLLM's statuses and finish reasons.

Created by the API layer (:mod:`drill.stack.replica.openai_api`) once a request is validated, handed to
:meth:`drill.stack.inference.scheduler.Scheduler.add_request`, and mutated only by the scheduler (decide)
and :meth:`~drill.stack.inference.scheduler.Scheduler.update_from_output` (apply). Times are seconds on
the engine loop's monotonic clock unless the name says ``wall``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Protocol

__all__ = ["FinishReason", "Request", "RequestSink", "RequestStatus", "block_hashes"]


class RequestStatus(enum.IntEnum):
    """Where a request is (vLLM ``RequestStatus``); values above ``PREEMPTED`` are finished."""

    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED_STOPPED = 3
    FINISHED_LENGTH = 4
    FINISHED_ABORTED = 5
    FINISHED_ERROR = 6

    @property
    def finished(self) -> bool:
        return self > RequestStatus.PREEMPTED


class FinishReason(str, enum.Enum):
    """vLLM's ``FINISH_REASON_STRINGS`` (docs/serving-facts.md §2.2), the ``finished_reason`` label values."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"
    ERROR = "error"
    REPETITION = "repetition"


_FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: FinishReason.STOP,
    RequestStatus.FINISHED_LENGTH: FinishReason.LENGTH,
    RequestStatus.FINISHED_ABORTED: FinishReason.ABORT,
    RequestStatus.FINISHED_ERROR: FinishReason.ERROR,
}


class RequestSink(Protocol):
    """Receives a request's output as the engine produces it; implemented by the API layer.

    Both methods are called synchronously from the engine's step loop and must not block.
    """

    def on_tokens(self, request: Request, token_ids: Sequence[int], finished: bool) -> None:
        """New tokens of ``request`` (``finished``: this is its last output)."""

    def on_error(self, request: Request, status: int, message: str, error_type: str) -> None:
        """The request failed (engine death, queue timeout); nothing more follows."""


class TokenSource(Protocol):
    """Where a request's output tokens come from (:class:`~drill.stack.inference.textgen.TokenSampler`)."""

    def next_token(self) -> int:
        """The next output token's id."""


def block_hashes(tokens: Sequence[object], block_size: int) -> list[int]:
    """Chained hashes of the full ``block_size``-token blocks of ``tokens`` (vLLM's prefix-cache keys).

    Block i's hash covers all tokens before and in it, so equal hashes mean equal prefixes.
    """
    hashes: list[int] = []
    parent = 0
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, tuple(tokens[start : start + block_size])))
        hashes.append(parent)
    return hashes


class Request:
    """A request's state in the engine. ``prompt_tokens`` are the tokenizer's tokens (words or ids)."""

    __slots__ = (
        "request_id",
        "prompt_tokens",
        "num_prompt_tokens",
        "max_tokens",
        "min_tokens",
        "stop_after",
        "priority",
        "arrival_time",
        "arrival_wall",
        "output_token_ids",
        "num_tokens",
        "num_computed_tokens",
        "status",
        "num_cached_tokens",
        "queued_ts",
        "scheduled_ts",
        "first_scheduled_ts",
        "first_token_ts",
        "last_token_ts",
        "finished_ts",
        "num_preemptions",
        "sink",
        "sampler",
        "block_hashes",
        "context",
        "aborted_in",
    )

    def __init__(
        self,
        request_id: str,
        prompt_tokens: Sequence[object],
        *,
        max_tokens: int,
        arrival_time: float,
        arrival_wall: float = 0.0,
        priority: int = 0,
        min_tokens: int = 0,
        stop_after: int | None = None,
        sink: RequestSink | None = None,
        sampler: TokenSource | None = None,
        context: object = None,
    ) -> None:
        self.request_id = request_id
        self.prompt_tokens = prompt_tokens
        self.num_prompt_tokens = len(prompt_tokens)
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens
        self.stop_after = stop_after  # natural end of the text (EOS) after this many tokens; None = never
        self.priority = priority
        self.arrival_time = arrival_time
        self.arrival_wall = arrival_wall
        self.output_token_ids: list[int] = []
        self.num_tokens = self.num_prompt_tokens  # prompt + generated: what a recompute must prefill
        self.num_computed_tokens = 0
        self.status = RequestStatus.WAITING
        self.num_cached_tokens = 0
        self.queued_ts = arrival_time
        self.scheduled_ts: float | None = None
        self.first_scheduled_ts: float | None = None
        self.first_token_ts: float | None = None
        self.last_token_ts: float | None = None
        self.finished_ts: float | None = None
        self.num_preemptions = 0
        self.sink = sink
        self.sampler = sampler
        self.block_hashes: list[int] | None = None
        self.context = context  # opaque to the engine: the API layer's per-request data
        self.aborted_in: str | None = None  # set by an abort: "waiting", "prefill" or "decode"

    def append_token(self, token_id: int) -> None:
        """Append one generated token (keeps :attr:`num_tokens` in step)."""
        self.output_token_ids.append(token_id)
        self.num_tokens += 1

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def finish_reason(self) -> FinishReason | None:
        """The finish reason once finished, else None."""
        return _FINISH_REASONS.get(self.status)

    @property
    def is_finished(self) -> bool:
        return self.status > RequestStatus.PREEMPTED

    @property
    def phase(self) -> str:
        """Where an unfinished request is: ``waiting`` (never scheduled, or preempted), ``prefill`` (scheduled,
        no token yet) or ``decode``."""
        if self.status is not RequestStatus.RUNNING:
            return "waiting"
        return "prefill" if self.num_output_tokens == 0 else "decode"

    def get_block_hashes(self, block_size: int) -> list[int]:
        """Prefix-cache keys of the prompt's full blocks (computed once, on first use)."""
        if self.block_hashes is None:
            self.block_hashes = block_hashes(self.prompt_tokens, block_size)
        return self.block_hashes

    def __lt__(self, other: Request) -> bool:
        """Priority order (vLLM's PRIORITY policy): lower ``priority``, then earlier arrival."""
        return (self.priority, self.arrival_time) < (other.priority, other.arrival_time)

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, {self.status.name}, prompt={self.num_prompt_tokens}, "
            f"out={self.num_output_tokens}/{self.max_tokens}, computed={self.num_computed_tokens})"
        )
